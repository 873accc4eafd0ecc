/**
 * docs/configuration.md against the programs: the page is what `npm run docs:config` makes of
 * the option tables; every flag the parsers accept is in a table (the nest-commander commands'
 * `@Option`s are read from their metadata); every `SVC_*` variable the programs read is on the
 * page. A failure names what to add to which table, or says to run `npm run docs:config`.
 */
import 'reflect-metadata';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { AcheronCommand } from '../apps/svc-control/src/acheron.command';
import { ApplyCommand } from '../apps/svc-control/src/apply.command';
import { AuditCommand } from '../apps/svc-control/src/audit.command';
import { ControlCommand } from '../apps/svc-control/src/control.command';
import { CONTROL_OPTIONS } from '../apps/svc-control/src/option-table';
import { MOUNT_OPTIONS } from '../apps/svc-fs-mount/src/option-table';
import { COMMANDS, MountRootCommand } from '../apps/svc-fs-mount/src/root.command';
import { FS_NODE_OPTIONS } from '../apps/svc-fs-node/src/option-table';
import { OptionTable, optionList, parseArgsOptions } from '../libs/ops/src/option-specs';
import { CONFIGURATION_PAGE, renderConfigurationPage } from '../scripts/config-docs';
import { SERVER_OPTIONS, STATE_COMMAND_OPTIONS } from '../src/option-table';
import { StateExportCommand, StateImportCommand } from '../src/state-cli/state.commands';

const ROOT = join(__dirname, '..');

/** nest-commander's metadata key of `@Option` (on the decorated method). */
const OPTION_META = 'CommandBuilder:Option:Meta';

/** The long flags a nest-commander command class declares with `@Option`, inherited ones included. */
function commanderFlags(command: abstract new (...args: never[]) => unknown): string[] {
  const flags: string[] = [];
  for (let proto = command.prototype as object | null; proto !== null && proto !== Object.prototype; proto = Object.getPrototypeOf(proto) as object | null) {
    for (const key of Object.getOwnPropertyNames(proto)) {
      const method = Object.getOwnPropertyDescriptor(proto, key)?.value as unknown;
      if (typeof method !== 'function') continue;
      const meta = Reflect.getMetadata(OPTION_META, method) as { flags?: string } | undefined;
      const long = meta?.flags ? /--([a-z0-9-]+)/.exec(meta.flags) : null;
      if (long) flags.push(long[1]);
    }
  }
  return flags;
}

/** The long flags of a table. */
function tableFlags(table: OptionTable): Set<string> {
  return new Set(optionList(table).flatMap((o) => (o.flag === undefined ? [] : [o.flag])));
}

/** Every `.ts` file below `dir` that is not a test. */
function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && e.name.endsWith('.ts') && !/\.(spec|e2e-spec)\.ts$/.test(e.name))
    .map((e) => join(e.parentPath, e.name));
}

describe('docs/configuration.md', () => {
  it('is what npm run docs:config makes of the option tables', () => {
    const page = readFileSync(join(ROOT, CONFIGURATION_PAGE), 'utf8');
    // Not toEqual on the whole page: the first differing line is the useful part of a failure.
    const want = renderConfigurationPage().split('\n');
    const have = page.split('\n');
    const at = want.findIndex((line, i) => have[i] !== line);
    expect({ stale: at === -1 && have.length === want.length ? null : `line ${at + 1}: run npm run docs:config`, have: have[at], want: want[at] }).toEqual({
      stale: null,
      have: undefined,
      want: undefined,
    });
  });

  it.each([
    ['svc-control', [ControlCommand, AcheronCommand, ApplyCommand, AuditCommand], CONTROL_OPTIONS],
    ['svc-fs-mount', [MountRootCommand, ...COMMANDS], MOUNT_OPTIONS],
    ['svc state', [StateExportCommand, StateImportCommand], STATE_COMMAND_OPTIONS],
  ] as const)('%s: every @Option of its commands is in its option table, and every flag of the table is an @Option', (_program, commands, table) => {
    const declared = new Set(commands.flatMap((c) => commanderFlags(c)));
    expect(declared.size).toBeGreaterThan(0);
    const listed = tableFlags(table);
    expect({ missingFromTable: [...declared].filter((f) => !listed.has(f)), notParsed: [...listed].filter((f) => !declared.has(f)) }).toEqual({
      missingFromTable: [],
      notParsed: [],
    });
  });

  it.each([
    ['svc', SERVER_OPTIONS],
    ['svc-fs-node', FS_NODE_OPTIONS],
  ] as const)('%s: its parser accepts exactly the flags of its option table', (_program, table) => {
    expect(Object.keys(parseArgsOptions(table)).sort()).toEqual([...tableFlags(table)].sort());
  });

  it('lists every SVC_* environment variable the programs read', () => {
    const page = readFileSync(join(ROOT, CONFIGURATION_PAGE), 'utf8');
    const read = new Set<string>();
    for (const dir of ['src', 'apps', 'libs']) {
      for (const file of sourceFiles(join(ROOT, dir))) {
        for (const m of readFileSync(file, 'utf8').matchAll(/\bSVC_[A-Z0-9_]*[A-Z0-9]\b(?![_*$])/g)) read.add(m[0]);
      }
    }
    expect(read.size).toBeGreaterThan(20);
    expect([...read].filter((name) => !page.includes(`\`${name}\``)).sort()).toEqual([]);
  });
});
