/**
 * `npm run docs:config`: writes docs/configuration.md, every flag and environment variable of
 * `svc`, `svc-fs-node`, `svc-fs-mount` and `svc-control`, from the option tables their parsers
 * read (src/option-table.ts, apps/<program>/src/option-table.ts, libs/ops/src/bundled-program.ts).
 * `--check` writes nothing and exits 1 when the page differs from what the tables give.
 * test/config-docs.spec.ts runs the same check, and checks the tables against the parsers.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { APPLY_SECTION, AUDIT_SECTION, CONTROL_OPTIONS, OPERATION_SECTION } from '../apps/svc-control/src/option-table';
import { INTERNAL_SECTION, MOUNT_OPTIONS, MOUNT_SECTION, STATUS_SECTION } from '../apps/svc-fs-mount/src/option-table';
import { DAEMON_SECTION, FS_NODE_OPTIONS } from '../apps/svc-fs-node/src/option-table';
import { BUNDLED_PROGRAM_OPTIONS } from '../libs/ops/src/bundled-program';
import { flagUsage, OptionSpec, OptionTable, optionList } from '../libs/ops/src/option-specs';
import { SERVER_OPTIONS, STATE_COMMAND_OPTIONS } from '../src/option-table';

/** The page, relative to the repository root. */
export const CONFIGURATION_PAGE = 'docs/configuration.md';

/** One program (or group of programs) of the page: its heading, what to say first, its table. */
interface ProgramDoc {
  heading: string;
  intro: string;
  table: OptionTable;
  /** Headings of the sections of `table` (entries with `section`), by section name. */
  sections?: Record<string, { heading: string; intro: string }>;
}

const PROGRAMS: ProgramDoc[] = [
  {
    heading: '`svc`',
    intro:
      'The control-plane server. Its environment is read once at start; `svc --help` prints the same list. How TLS is served and rotated: ' +
      '[Transport security (TLS)](operations.md#transport-security-tls); replicas: [Replicas on PostgreSQL](operations.md#replicas-on-postgresql); ' +
      "the `SVC_FS_*` deadlines: [Deadlines and hung nodes](protocol.md#deadlines-and-hung-nodes); a node daemon's session: " +
      '[Liveness from daemon sessions](protocol.md#liveness-from-daemon-sessions).',
    table: SERVER_OPTIONS,
  },
  {
    heading: '`svc state export`, `svc state import`',
    intro: 'The backup commands find the store as the server does ([Backups, moves and upgrades](operations.md#backups-moves-and-upgrades)).',
    table: STATE_COMMAND_OPTIONS,
    sections: { export: { heading: '`svc state export` only', intro: '' } },
  },
  {
    heading: '`svc-fs-node`',
    intro: 'The FS node. Standalone, it serves its exports; with `--control-url` it also pairs with `svc` (control daemon mode).',
    table: FS_NODE_OPTIONS,
    sections: {
      [DAEMON_SECTION]: {
        heading: 'Control daemon mode',
        intro: 'These flags need `--control-url`; without it each is a usage error (exit 2).',
      },
    },
  },
  {
    heading: '`svc-fs-mount`',
    intro:
      'The mount client. Global options go before or after the command (`status`, `cat`, `mount`, ...). The deadlines: ' +
      '[Deadlines and hung nodes](protocol.md#deadlines-and-hung-nodes); the FS extensions: [FS extensions](protocol.md#fs-extensions).',
    table: MOUNT_OPTIONS,
    sections: {
      [MOUNT_SECTION]: { heading: '`svc-fs-mount mount MOUNTPOINT`', intro: '' },
      [STATUS_SECTION]: { heading: '`svc-fs-mount status`', intro: '' },
      [INTERNAL_SECTION]: { heading: 'Set by `svc-fs-mount` itself', intro: 'Not for users: listed so that none goes unexplained.' },
    },
  },
  {
    heading: '`svc-control`',
    intro: 'The operator CLI. The session options are taken by every command.',
    table: CONTROL_OPTIONS,
    sections: {
      [OPERATION_SECTION]: { heading: '`svc-control OP [PAYLOAD]`', intro: 'One control operation (the default command).' },
      [APPLY_SECTION]: { heading: '`svc-control apply`', intro: '' },
      [AUDIT_SECTION]: { heading: '`svc-control audit`', intro: '' },
    },
  },
  {
    heading: 'Every bundled program',
    intro:
      '`svc-control`, `svc-fs-mount` and `svc-fs-node` start from a bundle with a V8 code cache ([How the programs start](architecture.md#how-the-programs-start)).',
    table: BUNDLED_PROGRAM_OPTIONS,
  },
];

/** `text` made safe for a Markdown table cell: `|` escaped, line breaks removed. */
function cell(text: string): string {
  return text.replace(/\|/g, '\\|').replace(/\n/g, ' ');
}

/** A literal (no blank) in backticks; prose (which may hold its own backticks) as it is. */
function literal(text: string): string {
  return /\s/.test(text) || text.includes('`') ? text : `\`${text}\``;
}

/** The Markdown table of some entries: flag, variable, default, unit, meaning. */
function markdownTable(entries: OptionSpec[]): string[] {
  const rows = entries.map((o) => {
    const flag = o.flag === undefined ? '' : `\`${flagUsage(o)}\`${o.repeatable ? ' (repeatable)' : ''}`;
    const env = o.env === undefined ? '' : `\`${o.env}\``;
    const dflt = o.default !== undefined ? literal(o.default) : o.flag !== undefined && o.value === undefined ? 'off' : 'unset';
    return `| ${cell(flag)} | ${cell(env)} | ${cell(dflt)} | ${cell(o.unit ?? '')} | ${cell(o.description)} |`;
  });
  return ['| Flag | Variable | Default | Unit | Meaning |', '|---|---|---|---|---|', ...rows];
}

/** The section names of a table, in the order of their first entry (`undefined`, the program's own entries, first). */
function sectionsOf(table: OptionTable): Array<string | undefined> {
  const names: Array<string | undefined> = [undefined];
  for (const o of optionList(table)) if (!names.includes(o.section)) names.push(o.section);
  return names;
}

/**
 * The whole page, from the option tables.
 * @throws Error when a table has a section the page has no heading for
 */
export function renderConfigurationPage(): string {
  const out: string[] = [
    '# Configuration',
    '',
    '<!-- Generated by `npm run docs:config` (scripts/config-docs.ts) from the option tables the programs parse; do not edit. -->',
    '',
    'Every flag and environment variable of the four programs, with its default. A flag wins over the',
    'variable beside it; an empty variable counts as unset. Durations are in the unit given; sizes in',
    "bytes. The same entries are in each program's `--help`, and the option tables they come from are",
    'what the parsers read: src/option-table.ts, apps/svc-fs-node/src/option-table.ts,',
    'apps/svc-fs-mount/src/option-table.ts and apps/svc-control/src/option-table.ts.',
  ];
  for (const p of PROGRAMS) {
    out.push('', `## ${p.heading}`, '', p.intro);
    for (const section of sectionsOf(p.table)) {
      const entries = optionList(p.table).filter((o) => o.section === section);
      if (entries.length === 0) continue;
      if (section !== undefined) {
        const s = p.sections?.[section];
        if (s === undefined) throw new Error(`no heading for section "${section}" of ${p.heading}`);
        out.push('', `### ${s.heading}`);
        if (s.intro !== '') out.push('', s.intro);
      }
      out.push('', ...markdownTable(entries));
    }
  }
  return `${out.join('\n')}\n`;
}

function main(): void {
  const root = join(__dirname, '..', '..');
  const file = join(root, CONFIGURATION_PAGE);
  const page = renderConfigurationPage();
  if (process.argv.includes('--check')) {
    if (readFileSync(file, 'utf8') !== page) {
      process.stderr.write(`${CONFIGURATION_PAGE} is stale: run npm run docs:config\n`);
      process.exitCode = 1;
    }
    return;
  }
  writeFileSync(file, page);
  process.stdout.write(`wrote ${CONFIGURATION_PAGE}\n`);
}

if (require.main === module) main();
