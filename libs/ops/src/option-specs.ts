/**
 * Declarative tables of the programs' flags and environment variables. A program's parser reads
 * its table (the flags `parseArgs` accepts, or the `@Option` decorators of its nest-commander
 * commands), its `--help` text is rendered from it, and so is docs/configuration.md
 * (`npm run docs:config`, scripts/config-docs.ts): the three cannot drift apart. Defaults are
 * rendered from the constants the parsers use, never written as text beside them.
 *
 * No imports: `svc-fs-node --help` loads this module and next to nothing else.
 */

/** One setting of a program: a flag, an environment variable, or a flag with a variable behind it. */
export interface OptionSpec {
  /** Long flag without its dashes, e.g. `state-dir`; absent for a variable alone. */
  flag?: string;
  /** One-letter alias without its dash, e.g. `h`. */
  short?: string;
  /** Name of the flag's value in usage texts, e.g. `DIR`; absent for a switch (a boolean flag). */
  value?: string;
  /** The flag may be given more than once. */
  repeatable?: boolean;
  /** Environment variable read when the flag is absent, or on its own when there is no flag. */
  env?: string;
  /** Default, as shown, rendered from the constant the parser uses; absent: unset (or off, for a switch). */
  default?: string;
  /** Unit of a numeric value, e.g. `ms`, `µs`, `bytes`, `days`. */
  unit?: string;
  /** What it does. Names may be in `backticks` (kept in Markdown, dropped in `--help`). */
  description: string;
  /** Where the entry is listed: a command (`mount`), a mode (`control daemon mode`); absent: the program's own options. */
  section?: string;
}

/** A program's settings by key, in the order they are listed. */
export type OptionTable = Readonly<Record<string, OptionSpec>>;

/** `node:util` `parseArgs` option configuration of one flag. */
export interface ParseArgsOption {
  type: 'string' | 'boolean';
  multiple?: boolean;
  short?: string;
}

/** The entries of a table, in order. */
export function optionList(table: OptionTable): OptionSpec[] {
  return Object.values(table);
}

/**
 * The `parseArgs` options of every flag in a table (variables alone are left out): a flag with a
 * value is a string option, one without is a boolean switch.
 * @returns options keyed by long flag name
 */
export function parseArgsOptions(table: OptionTable): Record<string, ParseArgsOption> {
  const options: Record<string, ParseArgsOption> = {};
  for (const o of optionList(table)) {
    if (o.flag === undefined) continue;
    const option: ParseArgsOption = { type: o.value === undefined ? 'boolean' : 'string' };
    if (o.repeatable) option.multiple = true;
    if (o.short !== undefined) option.short = o.short;
    options[o.flag] = option;
  }
  return options;
}

/**
 * nest-commander's `@Option` argument for one table entry: commander's flag syntax
 * (`-f, --file <file>`, `--no-binary`) and the description with its default and variable.
 * @throws Error when the entry has no flag (a variable alone is not a commander option)
 */
export function commanderOption(o: OptionSpec): { flags: string; description: string } {
  if (o.flag === undefined) throw new Error(`${o.env ?? 'an option'} has no flag`);
  const value = o.value === undefined ? '' : ` <${o.value.toLowerCase()}>`;
  return { flags: `${o.short !== undefined ? `-${o.short}, ` : ''}--${o.flag}${value}`, description: helpDescription(o) };
}

/** The usage form of an entry's flag, e.g. `-f, --file FILE` (empty for a variable alone). */
export function flagUsage(o: OptionSpec): string {
  if (o.flag === undefined) return '';
  return `${o.short !== undefined ? `-${o.short}, ` : ''}--${o.flag}${o.value === undefined ? '' : ` ${o.value}`}`;
}

/** `text` without Markdown backticks. */
export function plainText(text: string): string {
  return text.replace(/`/g, '');
}

/** The default with its unit, e.g. `30000 ms`; undefined when there is none. */
export function defaultWithUnit(o: OptionSpec): string | undefined {
  if (o.default === undefined) return undefined;
  return o.unit !== undefined && /^\d+$/.test(o.default) ? `${o.default} ${o.unit}` : o.default;
}

/**
 * The `--help` description of an entry: its description, then what stands behind the flag, e.g.
 * `state directory (or $SVC_STATE_DIR; default ./.svc)`.
 */
export function helpDescription(o: OptionSpec): string {
  const notes: string[] = [];
  if (o.flag !== undefined && o.env !== undefined) notes.push(`or $${o.env}`);
  const d = defaultWithUnit(o);
  if (d !== undefined) notes.push(`default: ${plainText(d)}`);
  else if (o.unit !== undefined) notes.push(o.unit);
  if (o.repeatable) notes.push('repeatable');
  return `${plainText(o.description)}${notes.length > 0 ? ` (${notes.join('; ')})` : ''}`;
}

/** Widest line of a `--help` text, characters. */
const HELP_WIDTH = 110;

/** `text` broken into lines of at most `width` characters at spaces (a longer word stays whole). */
function wrap(text: string, width: number): string[] {
  const lines: string[] = [];
  let line = '';
  for (const word of text.split(' ')) {
    if (line !== '' && line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else line = line === '' ? word : `${line} ${word}`;
  }
  if (line !== '') lines.push(line);
  return lines;
}

/**
 * The `--help` lines of some entries, two columns: the flag (or, for a variable alone, the
 * variable) and its {@link helpDescription}, wrapped to the help width.
 * @param entries the entries to list, in order
 * @param column width of the first column, characters (a longer flag puts its description on the next line)
 */
export function helpLines(entries: readonly OptionSpec[], column = 30): string[] {
  const lines: string[] = [];
  for (const o of entries) {
    const left = `  ${o.flag !== undefined ? flagUsage(o) : o.env!}`;
    const text = wrap(helpDescription(o), HELP_WIDTH - column);
    const pad = ' '.repeat(column);
    if (left.length >= column - 1) lines.push(left, ...text.map((t) => pad + t));
    else lines.push(left.padEnd(column) + text[0], ...text.slice(1).map((t) => pad + t));
  }
  return lines;
}

/** The entries of one section of a table (`undefined`: the program's own options), flags or variables alone. */
export function sectionEntries(table: OptionTable, section: string | undefined, kind: 'flags' | 'variables'): OptionSpec[] {
  return optionList(table).filter((o) => o.section === section && (kind === 'flags' ? o.flag !== undefined : o.flag === undefined));
}
