#!/usr/bin/env node
/**
 * postinstall: rebuilds the optional `fuse-native` binding from source with one fix.
 *
 * fuse-native 2.2.6 (the last release) hands `utimens` the access time twice: its C glue
 * marshals `l->atime` into the mtime arguments (upstream issue sagemathinc/fuse-native#3), so
 * through a FUSE mount `cp -p`, `rsync -t` and `touch -d` set mtime to the atime
 * they meant. This script replaces that one line in `fuse-native.c` and runs node-gyp there;
 * fuse-native's loader (node-gyp-build) prefers `build/Release` over its prebuilt binary.
 *
 * Never fails the install: without fuse-native (it is optional) it does nothing; when the
 * build cannot run (no C compiler, no node headers) it restores the original source, keeps
 * the prebuilt binding and prints what is lost and how to fix it.
 * Run it again by hand with `npm run postinstall`.
 */
'use strict';
const { execFileSync } = require('node:child_process');
const { existsSync, readFileSync, renameSync, writeFileSync } = require('node:fs');
const { dirname, join } = require('node:path');

const BUG = 'FUSE_UINT64_TO_INTS_ARGV(l->atime, 5)';
const FIX = 'FUSE_UINT64_TO_INTS_ARGV(l->mtime, 5)';

function say(msg) {
  process.stderr.write(`svc postinstall: ${msg}\n`);
}

/** npm's own node-gyp: npm names it in lifecycle scripts; else the one of the npm beside node. */
function nodeGyp() {
  const candidates = [process.env.npm_config_node_gyp];
  if (process.env.npm_execpath) candidates.push(join(dirname(process.env.npm_execpath), '..', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  // Run by hand: the npm installed beside this node (…/bin/node, …/lib/node_modules/npm).
  candidates.push(join(dirname(process.execPath), '..', 'lib', 'node_modules', 'npm', 'node_modules', 'node-gyp', 'bin', 'node-gyp.js'));
  try {
    candidates.push(require.resolve('node-gyp/bin/node-gyp.js'));
  } catch {
    /* not installed locally */
  }
  return candidates.find((c) => c && existsSync(c)) ?? null;
}

function main() {
  let dir;
  try {
    dir = dirname(require.resolve('fuse-native/package.json'));
  } catch {
    return; // optional dependency not installed (unsupported platform): FUSE mounts say so at run time
  }
  const file = join(dir, 'fuse-native.c');
  const built = join(dir, 'build', 'Release', 'fuse.node');
  const source = readFileSync(file, 'utf8');
  if (!source.includes(BUG)) {
    if (source.includes(FIX) && existsSync(built)) return; // fixed and built already
    if (!source.includes(FIX)) return say(`fuse-native.c has changed upstream; left as it is (check its utimens)`);
  }
  const gyp = nodeGyp();
  const fixed = source.replace(BUG, FIX);
  writeFileSync(`${file}.tmp`, fixed);
  renameSync(`${file}.tmp`, file);
  try {
    if (!gyp) throw new Error('node-gyp not found (it comes with npm)');
    // Headers of the running node when it ships them (distro and tarball installs): no download.
    const prefix = join(dirname(process.execPath), '..');
    const args = [gyp, 'rebuild'];
    if (!process.env.npm_config_nodedir && existsSync(join(prefix, 'include', 'node', 'node_api.h'))) args.push(`--nodedir=${prefix}`);
    execFileSync(process.execPath, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], timeout: 300_000 });
    if (!existsSync(built)) throw new Error(`node-gyp finished but ${built} is missing`);
    say('built fuse-native from source with its utimens fix (mtime is no longer replaced by atime)');
  } catch (e) {
    const detail = String(e.stderr ?? e.message).trim().split('\n').slice(-3).join(' | ');
    writeFileSync(`${file}.tmp`, source);
    renameSync(`${file}.tmp`, file);
    say(`could not build fuse-native from source (${detail}).`);
    say('FUSE mounts still work with its prebuilt binding, but setting file times through one (cp -p, rsync -t, touch -d)');
    say('sets mtime to the access time. Install a C compiler (Debian: apt-get install g++ make python3) and run');
    say('`npm run postinstall` to fix it.');
  }
}

main();
