#!/usr/bin/env node
/**
 * postinstall (and `npm run build:native`): builds the native addons (C over Node-API) with npm's
 * node-gyp, each on its own, so that one that cannot be built does not keep the other from
 * being built:
 *  - native/fuse3, the libfuse 3 binding loaded by libs/fuse3, into
 *    native/fuse3/build/Release/svc_fuse3.node; it needs pkg-config and libfuse 3's headers;
 *  - native/posix, the Linux system calls Node.js has no API for (mknod, xattrs, renameat2, ...),
 *    loaded by libs/fs/src/server/local/posix-native.ts, into
 *    native/posix/build/Release/svc_posix.node; it needs nothing beyond libc.
 * Both need a C compiler, make and python3 (node-gyp); they link with the C compiler, so no C++
 * compiler is needed.
 *
 * Never fails the install: for each addon that cannot be built (something missing, or the build
 * fails) it prints one line naming the Debian packages and goes on; it always exits 0. Its
 * loader then gives the same advice (libs/fuse3 throws it; posix-native says it). Node's headers
 * come from the running node's prefix when it ships them (distribution and tarball installs), so
 * nothing is downloaded.
 */
'use strict';
const { execFileSync } = require('node:child_process');
const { existsSync } = require('node:fs');
const { dirname, join } = require('node:path');

const NATIVE = join(__dirname, '..', 'native');

/**
 * The addons: `packages`: what a Debian machine needs to build (and use) it; `missing`: what it
 * needs beyond a C compiler, make, python3 and node-gyp and is not here.
 */
const ADDONS = [
  {
    what: 'the libfuse 3 binding (native/fuse3)',
    dir: join(NATIVE, 'fuse3'),
    file: 'svc_fuse3.node',
    packages: 'libfuse3-dev fuse3 gcc make pkg-config python3',
    missing() {
      if (!runs('pkg-config', ['--version'])) return ['pkg-config'];
      if (!runs('pkg-config', ['--exists', 'fuse3'])) return ["libfuse 3's headers (pkg-config fuse3)"];
      return [];
    },
  },
  {
    what: 'the POSIX calls addon (native/posix)',
    dir: join(NATIVE, 'posix'),
    file: 'svc_posix.node',
    packages: 'gcc make python3',
    missing: () => [],
  },
];

function say(msg) {
  process.stderr.write(`svc postinstall: ${msg}\n`);
}

function notBuilt(addon, why) {
  say(`${addon.what} was not built (${why}); it needs, on Debian: apt-get install ${addon.packages}; then run \`npm run build:native\``);
}

/** True when `cmd args` runs and exits 0. */
function runs(cmd, args) {
  try {
    execFileSync(cmd, args, { stdio: 'ignore', timeout: 30_000 });
    return true;
  } catch {
    return false;
  }
}

/** npm's own node-gyp: npm names it in lifecycle scripts; else the one of the npm beside node. */
function nodeGyp() {
  const candidates = [process.env.npm_config_node_gyp];
  if (process.env.npm_execpath) candidates.push(join(dirname(process.env.npm_execpath), '..', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  candidates.push(join(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  return candidates.find((c) => c && existsSync(c)) ?? null;
}

/** Builds one addon with node-gyp; prints the advice when it is not built. */
function build(addon, cc, gyp, common) {
  const missing = [...common, ...addon.missing()];
  if (missing.length > 0) return notBuilt(addon, `missing ${missing.join(', ')}`);
  const built = join(addon.dir, 'build', 'Release', addon.file);
  const prefix = join(dirname(process.execPath), '..');
  const args = [gyp, 'rebuild'];
  if (!process.env.npm_config_nodedir && existsSync(join(prefix, 'include', 'node', 'node_api.h'))) args.push(`--nodedir=${prefix}`);
  try {
    execFileSync(process.execPath, args, {
      cwd: addon.dir,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 300_000,
      env: { ...process.env, LINK: process.env.LINK || cc },
    });
    if (!existsSync(built)) throw new Error(`node-gyp finished but ${built} is missing`);
  } catch (e) {
    const detail = String(e.stderr ?? e.message)
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('gyp info'))
      .slice(-3)
      .join(' | ');
    notBuilt(addon, `node-gyp failed: ${detail}`);
  }
}

function main() {
  // an addon without its source is skipped (an image that copied only part of the tree)
  const addons = ADDONS.filter((a) => existsSync(join(a.dir, 'binding.gyp')));
  if (addons.length === 0) return;
  const cc = process.env.CC || 'cc';
  const common = [];
  if (!runs(cc, ['--version'])) common.push(`a C compiler (${cc})`);
  if (!runs('make', ['--version'])) common.push('make');
  if (!runs('python3', ['--version'])) common.push('python3');
  const gyp = nodeGyp();
  if (!gyp) common.push('node-gyp (it comes with npm)');
  for (const addon of addons) {
    try {
      build(addon, cc, gyp, common);
    } catch (e) {
      notBuilt(addon, String(e?.message ?? e));
    }
  }
}

main();
