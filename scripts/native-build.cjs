#!/usr/bin/env node
/**
 * postinstall (and `npm run build:native`): builds the libfuse 3 binding, native/fuse3 (C over
 * Node-API, loaded by libs/fuse3), with npm's node-gyp into
 * native/fuse3/build/Release/svc_fuse3.node. It needs a C compiler, make, python3 (node-gyp),
 * pkg-config and libfuse 3's headers; it links with the C compiler, so no C++ compiler is needed.
 *
 * Never fails the install: when something is missing, or the build fails, it prints one line
 * naming the Debian packages and exits 0; libs/fuse3 then throws the same advice when it is
 * loaded. Node's headers come from the running node's prefix when it ships them (distribution
 * and tarball installs), so nothing is downloaded.
 */
'use strict';
const { execFileSync } = require('node:child_process');
const { existsSync } = require('node:fs');
const { dirname, join } = require('node:path');

const DIR = join(__dirname, '..', 'native', 'fuse3');
const BUILT = join(DIR, 'build', 'Release', 'svc_fuse3.node');
/** What a Debian machine needs to build the binding and to mount with it. */
const PACKAGES = 'libfuse3-dev fuse3 gcc make pkg-config python3';

function say(msg) {
  process.stderr.write(`svc postinstall: ${msg}\n`);
}

function notBuilt(why) {
  say(`the libfuse 3 binding (native/fuse3) was not built (${why}); it needs, on Debian: apt-get install ${PACKAGES}; then run \`npm run build:native\``);
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

function main() {
  if (!existsSync(join(DIR, 'binding.gyp'))) return; // a tree without the binding's source (an image that copied only part of it)
  const cc = process.env.CC || 'cc';
  const missing = [];
  if (!runs(cc, ['--version'])) missing.push(`a C compiler (${cc})`);
  if (!runs('make', ['--version'])) missing.push('make');
  if (!runs('python3', ['--version'])) missing.push('python3');
  if (!runs('pkg-config', ['--version'])) missing.push('pkg-config');
  else if (!runs('pkg-config', ['--exists', 'fuse3'])) missing.push("libfuse 3's headers (pkg-config fuse3)");
  const gyp = nodeGyp();
  if (!gyp) missing.push('node-gyp (it comes with npm)');
  if (missing.length > 0) return notBuilt(`missing ${missing.join(', ')}`);
  const prefix = join(dirname(process.execPath), '..');
  const args = [gyp, 'rebuild'];
  if (!process.env.npm_config_nodedir && existsSync(join(prefix, 'include', 'node', 'node_api.h'))) args.push(`--nodedir=${prefix}`);
  try {
    execFileSync(process.execPath, args, {
      cwd: DIR,
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 300_000,
      env: { ...process.env, LINK: process.env.LINK || cc },
    });
    if (!existsSync(BUILT)) throw new Error(`node-gyp finished but ${BUILT} is missing`);
  } catch (e) {
    const detail = String(e.stderr ?? e.message)
      .trim()
      .split('\n')
      .filter((l) => !l.startsWith('gyp info'))
      .slice(-3)
      .join(' | ');
    notBuilt(`node-gyp failed: ${detail}`);
  }
}

main();
