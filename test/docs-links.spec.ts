/**
 * The documentation's references resolve inside the repository: every relative Markdown link
 * of README.md and docs/*.md names a file of the repository (never one outside it) and, with
 * `#anchor`, a heading of that file (GitHub's anchors); and every `docs/<page>.md "Heading"`
 * that code, tests, scripts or docs cite names a heading of that page (the heading itself, or
 * its start, as `"Audit log"` for "Audit log (`control.audit_list`)").
 */
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = join(__dirname, '..');

/** The Markdown pages: README.md and every page of docs/. */
const PAGES = [
  'README.md',
  ...readdirSync(join(ROOT, 'docs'))
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** The lines of a Markdown text outside fenced code blocks. */
function proseLines(text: string): string[] {
  let fenced = false;
  return text.split('\n').filter((line) => {
    if (/^\s*(```|~~~)/.test(line)) {
      fenced = !fenced;
      return false;
    }
    return !fenced;
  });
}

/** A heading's text as GitHub renders it in an anchor: inline code marks and links dropped. */
function headingText(line: string): string {
  return line
    .replace(/^#+\s+/, '')
    .replace(/\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/`/g, '')
    .trim();
}

/** GitHub's anchor of a heading: lower case, punctuation but `-` and `_` dropped, blanks to `-`. */
function slug(text: string): string {
  return text
    .toLowerCase()
    .replace(/[^\p{L}\p{M}\p{N}\p{Pc}\- ]/gu, '')
    .replace(/ /g, '-');
}

/** The headings of a page (texts), in order. */
function headingsOf(page: string): string[] {
  return proseLines(readFileSync(join(ROOT, page), 'utf8'))
    .filter((l) => /^#{1,6}\s/.test(l))
    .map(headingText);
}

/** The anchors of a page, with GitHub's `-1`, `-2` for repeated headings. */
function anchorsOf(page: string): Set<string> {
  const seen = new Map<string, number>();
  const anchors = new Set<string>();
  for (const h of headingsOf(page)) {
    const base = slug(h);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    anchors.add(n === 0 ? base : `${base}-${n}`);
  }
  return anchors;
}

/** Every text file below `dir` (relative to the repository) whose name ends with one of `exts`. */
function filesBelow(dir: string, exts: string[]): string[] {
  const abs = join(ROOT, dir);
  if (!existsSync(abs)) return [];
  return readdirSync(abs, { withFileTypes: true, recursive: true })
    .filter((e) => e.isFile() && exts.some((x) => e.name.endsWith(x)))
    .map((e) => relative(ROOT, join(e.parentPath, e.name)));
}

describe('documentation links', () => {
  it('has the pages it is about', () => {
    expect(PAGES).toEqual(expect.arrayContaining(['README.md', 'docs/protocol.md', 'docs/configuration.md', 'docs/operations.md']));
  });

  it.each(PAGES)('%s: every relative link names a file of the repository and a heading of it', (page) => {
    const broken: string[] = [];
    for (const line of proseLines(readFileSync(join(ROOT, page), 'utf8'))) {
      // Inline code is not a link.
      for (const m of line.replace(/`[^`]*`/g, '').matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1];
        if (/^[a-z]+:/i.test(target)) continue;
        const [path, anchor] = target.split('#');
        const file = path === '' ? join(ROOT, page) : resolve(dirname(join(ROOT, page)), path);
        const rel = relative(ROOT, file);
        if (rel.startsWith('..')) broken.push(`${target}: outside the repository`);
        else if (!existsSync(file)) broken.push(`${target}: no such file`);
        else if (anchor !== undefined) {
          if (!rel.endsWith('.md') || statSync(file).isDirectory()) broken.push(`${target}: an anchor into a file that is not a page`);
          else if (!anchorsOf(rel).has(anchor)) broken.push(`${target}: no heading with that anchor in ${rel}`);
        }
      }
    }
    expect(broken).toEqual([]);
  });

  it('every docs/<page>.md "Heading" cited in the repository names a heading of that page', () => {
    const files = [
      ...['src', 'apps', 'libs', 'test', 'bench', 'scripts', 'ui/src'].flatMap((d) => filesBelow(d, ['.ts', '.cjs', '.mjs'])),
      ...filesBelow('deploy', ['.yaml', '.yml', '.json', 'Dockerfile']),
      ...PAGES,
      'docs/workspace.example.yaml',
      'jest.config.js',
    ];
    const missing: string[] = [];
    let cited = 0;
    for (const file of files) {
      const text = readFileSync(join(ROOT, file), 'utf8');
      for (const m of text.matchAll(/docs\/([a-z-]+\.md)`?,? "([^"\n]+)"/g)) {
        cited++;
        const page = `docs/${m[1]}`;
        const heading = m[2].replace(/`/g, '');
        if (!existsSync(join(ROOT, page))) missing.push(`${file}: ${page} does not exist`);
        else if (!headingsOf(page).some((h) => h === heading || h.startsWith(`${heading} `))) missing.push(`${file}: ${page} has no heading "${heading}"`);
      }
    }
    expect(cited).toBeGreaterThan(100);
    expect(missing).toEqual([]);
  });

  it('nothing in the documentation cites a file outside the repository', () => {
    const outside = PAGES.flatMap((page) =>
      readFileSync(join(ROOT, page), 'utf8')
        .split('\n')
        .filter((l) => /\.\.\/shared|PROTOCOL\.md|SPEC\.md|ARCHITECTURE\.md/.test(l))
        .map((l) => `${page}: ${l.trim()}`),
    );
    expect(outside).toEqual([]);
  });
});
