/**
 * The vendored pjdfstest (test/conformance/pjdfstest-85a8aea.tar.gz), unpacked and built for the
 * conformance step and `npm run bench:posix`.
 */
import { closeSync, openSync, readFileSync, writeFileSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { ROOT } from './processes';

/** The vendored suite's commit. */
export const PJDFSTEST_COMMIT = '85a8aea';
/** Its tarball. */
export const PJDFSTEST_TARBALL = join(ROOT, 'test', 'conformance', `pjdfstest-${PJDFSTEST_COMMIT}.tar.gz`);

/** The Linux filesystem detection of pjdfstest's tests/conf, which {@link buildPjdfstest} lets `PJDFSTEST_FS` override. */
const DETECT = "\tfs=`df -PT . | tail -1 | awk '{print toupper($2)}'`";

/**
 * Unpacks the suite in `dir` and builds it (`autoreconf -ifs && ./configure && make pjdfstest`,
 * output in `dir/build.log`). Its tests/conf then takes the filesystem type from `PJDFSTEST_FS`
 * when set (upper case, as `df -T` names it: `EXT4`), so that a mount can be tested as the
 * filesystem it serves: pjdfstest runs some checks only on filesystems it knows (the ctime of
 * a rename: EXT4, UFS, ZFS).
 * @returns the suite's tests directory (`dir/pjdfstest/tests`)
 * @throws Error naming the step that failed, with the end of the build log; or when tests/conf
 *   no longer has the detection it overrides
 */
export function buildPjdfstest(dir: string): string {
  execFileSync('tar', ['-xzf', PJDFSTEST_TARBALL, '-C', dir]);
  const src = join(dir, 'pjdfstest');
  const logFile = join(dir, 'build.log');
  const fd = openSync(logFile, 'w');
  try {
    for (const [cmd, ...args] of [['autoreconf', '-ifs'], ['./configure'], ['make', 'pjdfstest']]) {
      try {
        execFileSync(cmd, args, { cwd: src, stdio: ['ignore', fd, fd], timeout: 300_000 });
      } catch (e) {
        const tail = readFileSync(logFile, 'utf8').trim().split('\n').slice(-4).join(' / ');
        throw new Error(`${cmd} ${args.join(' ')}: ${(e as Error).message.split('\n')[0]}: ${tail}`);
      }
    }
  } finally {
    closeSync(fd);
  }
  const conf = join(src, 'tests', 'conf');
  const text = readFileSync(conf, 'utf8');
  if (!text.includes(DETECT)) throw new Error(`${conf} no longer has the Linux filesystem detection PJDFSTEST_FS overrides`);
  writeFileSync(conf, text.replace(DETECT, `\tfs=\${PJDFSTEST_FS:-${DETECT.slice('\tfs='.length)}}`));
  return join(src, 'tests');
}

/** The filesystem type of the directory `dir` as pjdfstest's conf names it (`df -PT`, upper case: `EXT4`). */
export function fsTypeOf(dir: string): string {
  return execFileSync('df', ['-PT', dir], { encoding: 'utf8' }).trim().split('\n').pop()!.split(/\s+/)[1].toUpperCase();
}

/**
 * `1-3, 5` -> [1, 2, 3, 5] (prove's `Failed tests:` lists, the conformance step's failure list).
 * @throws Error for a part that is neither a number nor a range (blank parts are skipped)
 */
export function expandRanges(text: string): number[] {
  const out: number[] = [];
  for (const part of text.split(',')) {
    if (part.trim() === '') continue;
    const m = /^\s*(\d+)(?:-(\d+))?\s*$/.exec(part);
    if (!m) throw new Error(`not a number or a range: ${JSON.stringify(part)}`);
    for (let i = Number(m[1]); i <= Number(m[2] ?? m[1]); i++) out.push(i);
  }
  return out;
}

/** [1, 2, 3, 5] -> `1-3, 5`. */
export function compactRanges(xs: Iterable<number>): string {
  const s = [...xs].sort((a, b) => a - b);
  const parts: string[] = [];
  for (let i = 0; i < s.length;) {
    let j = i;
    while (j + 1 < s.length && s[j + 1] === s[j] + 1) j++;
    parts.push(j === i ? String(s[i]) : `${s[i]}-${s[j]}`);
    i = j + 1;
  }
  return parts.join(', ');
}
