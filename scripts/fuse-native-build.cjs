#!/usr/bin/env node
/**
 * postinstall: rebuilds the optional `fuse-native` binding from source with five changes to its
 * C glue (`fuse-native.c`), then runs node-gyp there; fuse-native's loader (node-gyp-build)
 * prefers `build/Release` over its prebuilt binary.
 *
 * 1. utimens fix: fuse-native 2.2.6 (the last release) hands `utimens` the access time twice
 *    (it marshals `l->atime` into the mtime arguments; upstream issue sagemathinc/fuse-native#3),
 *    so through a FUSE mount `cp -p`, `rsync -t` and `touch -d` set mtime to the atime they meant.
 * 2. flush without a hop: the kernel sends FLUSH at every close(2), and
 *    fuse-native hands each one from its FUSE thread to the event loop and back (tens of µs
 *    on a virtual machine). A handle whose number has bit 30 set ({@link FH_NOTHING_TO_FLUSH}
 *    in libs/fs/src/fuse/fuse-handles.ts: the mount sets it on read-only handles, which never
 *    hold pending writes) is answered in the FUSE thread at once. Without this change the
 *    flush reaches JS as before, which answers it the same way: only the hop is saved.
 * 3. answer wait that spins: a FUSE thread waits for the event loop's answer
 *    spinning up to 30 µs before it sleeps (on more than one CPU): most answers come from the
 *    mount's caches within a few µs, and waking a sleeping thread costs tens of µs on a virtual
 *    machine (bench:fuse-latency: a cached stat(2) takes 19-24 µs). An answer that takes
 *    longer (a round trip to a node) costs at most those 30 µs of one CPU.
 * 4. create given the open flags: fuse-native hands `create` only the path and the mode, so
 *    O_EXCL, O_APPEND and O_TRUNC of an open(2) that creates could not reach the node, where
 *    exclusive creation and appends must be decided (two mounts creating one lock file both
 *    won). The flags are passed as a third argument; the mount's `_op_create` reads it
 *    (apps/svc-fs-mount/src/commands/fuse.command.ts).
 * 5. times in µs, and utimens of one time alone: fuse-native marshals times in ms, so a time set
 *    through the mount lost its sub-ms digits and stat showed none; they cross in µs now (the
 *    binding exports `svc_time_unit_us`, which the mount reads to know the unit). And without
 *    `flag_utime_omit_ok`, libfuse 2.9 calls utimens only when both times are set, dropping a
 *    setattr of mtime alone (`futimens` with UTIME_OMIT for the atime, as GNU tar does for every
 *    file it extracts; `touch -m`) while reporting success. With the flag, UTIME_OMIT and
 *    UTIME_NOW reach the operation, marshalled as values no time can have (high word
 *    0xFFFFFFFE and 0xFFFFFFFF); the mount's utimens reads them.
 *
 * Never fails the install: without fuse-native (it is optional) it does nothing; when the
 * build cannot run (no C compiler, no node headers) it restores the original source, keeps
 * the prebuilt binding and prints what is lost and how to fix it. A change whose text is not
 * found (fuse-native changed upstream) is left out, with a message.
 * Run it again by hand with `npm run postinstall`.
 */
'use strict';
const { execFileSync } = require('node:child_process');
const { existsSync, readFileSync, renameSync, writeFileSync } = require('node:fs');
const { dirname, join } = require('node:path');

/** The changes to fuse-native.c: each replaces `from` (found once) with `to`. */
const PATCHES = [
  {
    name: 'utimens fix (mtime is no longer replaced by atime)',
    from: 'FUSE_UINT64_TO_INTS_ARGV(l->atime, 5)',
    to: 'FUSE_UINT64_TO_INTS_ARGV(l->mtime, 5)',
  },
  {
    name: 'flush of read-only handles answered in the FUSE thread',
    from: '  if (implemented[op_flush]) ops.flush = fuse_native_flush;',
    to: '  if (implemented[op_flush]) ops.flush = svc_flush;',
    // defined before the function that registers it
    before: 'NAPI_METHOD(fuse_native_mount) {',
    define: [
      '// svc (scripts/fuse-native-build.cjs): a handle marked as holding nothing to flush (bit 30 of',
      '// its number) is answered here, without a hop to the event loop and back.',
      '#define SVC_FH_NOTHING_TO_FLUSH 0x40000000',
      'static int svc_flush (const char *path, struct fuse_file_info *info) {',
      '  if (info != NULL && (info->fh & SVC_FH_NOTHING_TO_FLUSH)) return 0;',
      '  return fuse_native_flush(path, info);',
      '}',
      '',
      '',
    ].join('\n'),
  },
  {
    name: 'answer wait that spins up to 30 us before sleeping',
    from: '  uv_sem_wait(&(l->sem));\\\n  return l->res;',
    to: '  svc_wait_answer(&(l->sem));\\\n  return l->res;',
    before: '#define FUSE_NATIVE_HANDLER(name, blk)',
    define: [
      "// svc (scripts/fuse-native-build.cjs): the FUSE thread waits for the event loop's answer",
      '// spinning up to 30 us before it sleeps, on more than one CPU: a cached answer comes back',
      '// in a few us, and waking a sleeping thread costs tens of us on a virtual machine.',
      '#include <time.h>',
      '#include <unistd.h>',
      'static int svc_spin_cpus = -1;',
      'static void svc_wait_answer (uv_sem_t *sem) {',
      '  if (svc_spin_cpus < 0) svc_spin_cpus = (int) sysconf(_SC_NPROCESSORS_ONLN);',
      '  if (svc_spin_cpus > 1) {',
      '    struct timespec t0, t;',
      '    clock_gettime(CLOCK_MONOTONIC, &t0);',
      '    for (;;) {',
      '      for (int i = 0; i < 32; i++) {',
      '        if (uv_sem_trywait(sem) == 0) return;',
      '#if defined(__x86_64__) || defined(__i386__)',
      '        __asm__ __volatile__("pause" ::: "memory");',
      '#elif defined(__aarch64__)',
      '        __asm__ __volatile__("yield" ::: "memory");',
      '#endif',
      '      }',
      '      clock_gettime(CLOCK_MONOTONIC, &t);',
      '      if ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) > 30000L) break;',
      '    }',
      '  }',
      '  uv_sem_wait(sem);',
      '}',
      '',
      '',
    ].join('\n'),
  },
  {
    name: 'create given the open flags',
    from: [
      'FUSE_METHOD(create, 2, 1, (const char *path, mode_t mode, struct fuse_file_info *info), {',
      '  l->path = path;',
      '  l->mode = mode;',
      '  l->info = info;',
      '}, {',
      '  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));',
      '  napi_create_uint32(env, l->mode, &(argv[3]));',
      '}, {',
    ].join('\n'),
    to: [
      'FUSE_METHOD(create, 3, 1, (const char *path, mode_t mode, struct fuse_file_info *info), {',
      '  l->path = path;',
      '  l->mode = mode;',
      '  l->info = info;',
      '}, {',
      '  napi_create_string_utf8(env, l->path, NAPI_AUTO_LENGTH, &(argv[2]));',
      '  napi_create_uint32(env, l->mode, &(argv[3]));',
      '  napi_create_uint32(env, l->info != NULL ? l->info->flags : 0, &(argv[4])); // svc: the open(2) flags',
      '}, {',
    ].join('\n'),
  },
  {
    name: 'times in µs, and utimens of one time alone (UTIME_OMIT, UTIME_NOW)',
    from: [
      'static void uint32s_to_timespec (struct timespec* ts, uint32_t** ints) {',
      '  uint64_t ms = uint32s_to_uint64(ints);',
      '  ts->tv_sec = ms / 1000;',
      '  ts->tv_nsec = (ms % 1000) * 1000000;',
      '}',
      '',
      'static uint64_t timespec_to_uint64 (const struct timespec* ts) {',
      '  uint64_t ms = (ts->tv_sec * 1000) + (ts->tv_nsec / 1000000);',
      '  return ms;',
      '}',
    ].join('\n'),
    to: [
      '// svc (scripts/fuse-native-build.cjs): times cross between C and JS in µs since the epoch, not',
      '// ms (exported as svc_time_unit_us); UTIME_OMIT and UTIME_NOW (libfuse passes them with',
      '// flag_utime_omit_ok) as values no time can have: high word 0xFFFFFFFE (omit), 0xFFFFFFFF (now).',
      'static const uint32_t svc_time_unit_us = 1;',
      'static void uint32s_to_timespec (struct timespec* ts, uint32_t** ints) {',
      '  uint64_t us = uint32s_to_uint64(ints);',
      '  ts->tv_sec = us / 1000000;',
      '  ts->tv_nsec = (us % 1000000) * 1000;',
      '}',
      '',
      'static uint64_t timespec_to_uint64 (const struct timespec* ts) {',
      '  if (ts->tv_nsec == ((1l << 30) - 2l)) return 0xFFFFFFFE00000000ull;',
      '  if (ts->tv_nsec == ((1l << 30) - 1l)) return 0xFFFFFFFF00000000ull;',
      '  return ((uint64_t) ts->tv_sec * 1000000) + (ts->tv_nsec / 1000);',
      '}',
    ].join('\n'),
    also: [
      {
        from: '  if (implemented[op_utimens]) ops.utimens = fuse_native_utimens;',
        to: '  if (implemented[op_utimens]) ops.utimens = fuse_native_utimens;\n  ops.flag_utime_omit_ok = 1; // svc: utimens also when only one of the times is set',
      },
      { from: '  NAPI_EXPORT_UINT32(op_rmdir)\n', to: '  NAPI_EXPORT_UINT32(op_rmdir)\n  NAPI_EXPORT_UINT32(svc_time_unit_us)\n' },
    ],
  },
];

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
  let patched = source;
  const applied = [];
  for (const p of PATCHES) {
    if (patched.includes(p.to)) continue; // applied by an earlier run
    // Every edit of a change, or none of it.
    const edits = [{ from: p.from, to: p.to }, ...(p.before ? [{ from: p.before, to: `${p.define}${p.before}` }] : []), ...(p.also ?? [])];
    if (edits.some((e) => !patched.includes(e.from))) {
      say(`fuse-native.c has changed upstream; left without the ${p.name}`);
      continue;
    }
    for (const e of edits) patched = patched.replace(e.from, e.to);
    applied.push(p.name);
  }
  // Nothing new to apply: built already, or nothing applies at all (the prebuilt binding stays).
  if (applied.length === 0 && (existsSync(built) || !PATCHES.some((p) => source.includes(p.to)))) return;
  const gyp = nodeGyp();
  writeFileSync(`${file}.tmp`, patched);
  renameSync(`${file}.tmp`, file);
  try {
    if (!gyp) throw new Error('node-gyp not found (it comes with npm)');
    // Headers of the running node when it ships them (distro and tarball installs): no download.
    const prefix = join(dirname(process.execPath), '..');
    const args = [gyp, 'rebuild'];
    if (!process.env.npm_config_nodedir && existsSync(join(prefix, 'include', 'node', 'node_api.h'))) args.push(`--nodedir=${prefix}`);
    execFileSync(process.execPath, args, { cwd: dir, stdio: ['ignore', 'pipe', 'pipe'], timeout: 300_000 });
    if (!existsSync(built)) throw new Error(`node-gyp finished but ${built} is missing`);
    say(
      `built fuse-native from source with: ${PATCHES.filter((p) => patched.includes(p.to))
        .map((p) => p.name)
        .join('; ')}`,
    );
  } catch (e) {
    const detail = String(e.stderr ?? e.message)
      .trim()
      .split('\n')
      .slice(-3)
      .join(' | ');
    writeFileSync(`${file}.tmp`, source);
    renameSync(`${file}.tmp`, file);
    say(`could not build fuse-native from source (${detail}).`);
    say('FUSE mounts still work with its prebuilt binding, but setting file times through one (cp -p, rsync -t, touch -d)');
    say(
      'sets mtime to the access time (and not at all when only mtime is set: tar -x), O_EXCL and O_APPEND of an open that creates do not act across clients,',
    );
    say('and each close(2) costs a hop to the event loop. Install a C compiler');
    say('(Debian: apt-get install g++ make python3) and run');
    say('`npm run postinstall` to fix it.');
  }
}

main();
