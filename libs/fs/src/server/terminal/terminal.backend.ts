/**
 * The terminal service export `terminal-<id>`: a synthetic tree
 *
 * ```
 * README.md                   how to use it
 * control/invoke.json         write a request, then read the result (same handle), or read the last result
 * control/last_result.json    the last result of this terminal
 * ```
 *
 * A request `{argv:[program, ...args], cwd?, env?, stdin?, timeout_ms?}` runs the program with
 * execFile semantics (no shell), in a working directory confined to the terminal's base
 * directory, with exactly the environment given (plus `PATH`), bounded by `timeout_ms`
 * (default 30 s, at most 10 min) and with each output stream capped at 1 MiB
 * (`truncated:true` past it). The request runs when the writing handle is read or closed; an
 * invalid request is EINVAL on that read or close and runs nothing. The result is
 * `{exit_code, signal, stdout, stderr, duration_ms, truncated, timed_out}`.
 */
import { spawn } from 'node:child_process';
import { realpath, stat } from 'node:fs/promises';
import { isAbsolute, relative, resolve, sep } from 'node:path';
import { Errno, FsError, StatFs } from '@svc/protocol';
import type { FsAttrChanges, FsBackend, FsOpenFile, FsStat } from '../fs-backend';

/** Limits of the terminal service (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
export const TERMINAL_LIMITS = {
  defaultTimeoutMs: 30_000,
  maxTimeoutMs: 600_000,
  /** Per output stream, bytes. */
  maxOutputBytes: 1024 * 1024,
  /** Largest request document, bytes. */
  maxRequestBytes: 1024 * 1024,
  /** Requests running at once per terminal. */
  maxConcurrent: 8,
} as const;

/** A terminal request (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"). */
export interface TerminalRequest {
  argv: string[];
  cwd?: string;
  env?: Record<string, string>;
  stdin?: string;
  timeout_ms?: number;
}

/** A terminal result (docs/protocol.md "FS sessions on `svc-fs-node` (`/v2/fs`)"), plus `timed_out`. */
export interface TerminalResult {
  exit_code: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  duration_ms: number;
  truncated: boolean;
  timed_out: boolean;
}

const O_ACCMODE = 3;
const O_EXCL = 0o200;
const DIR_MODE = 0o40555;
const README_MODE = 0o100444;
const INVOKE_MODE = 0o100600;
const RESULT_MODE = 0o100444;

/**
 * Parses and checks a request document.
 * @throws FsError EINVAL with a message naming what is wrong (nothing is run)
 */
export function parseTerminalRequest(bytes: Buffer): TerminalRequest {
  const invalid = (msg: string): never => {
    throw new FsError(Errno.EINVAL, `invalid terminal request: ${msg}`);
  };
  if (bytes.length > TERMINAL_LIMITS.maxRequestBytes) invalid(`larger than ${TERMINAL_LIMITS.maxRequestBytes} bytes`);
  let doc: unknown;
  try {
    doc = JSON.parse(bytes.toString('utf8'));
  } catch (e) {
    return invalid(`not valid JSON (${(e as Error).message})`);
  }
  if (typeof doc !== 'object' || doc === null || Array.isArray(doc)) invalid('must be a JSON object');
  const r = doc as Record<string, unknown>;
  if (!Array.isArray(r.argv) || r.argv.length === 0 || !r.argv.every((a) => typeof a === 'string') || r.argv[0].length === 0) {
    invalid('argv must be a non-empty array of strings naming the program first');
  }
  if (r.cwd !== undefined && typeof r.cwd !== 'string') invalid('cwd must be a string');
  if (r.env !== undefined) {
    if (typeof r.env !== 'object' || r.env === null || Array.isArray(r.env)) invalid('env must be an object of strings');
    for (const [k, v] of Object.entries(r.env as object)) {
      if (typeof v !== 'string' || k.length === 0 || k.includes('=') || k.includes('\0') || v.includes('\0'))
        invalid(`env.${k} must be a string (no "=" in names, no NUL)`);
    }
  }
  if (r.stdin !== undefined && typeof r.stdin !== 'string') invalid('stdin must be a string');
  if (r.timeout_ms !== undefined) {
    if (typeof r.timeout_ms !== 'number' || !Number.isInteger(r.timeout_ms) || r.timeout_ms <= 0 || r.timeout_ms > TERMINAL_LIMITS.maxTimeoutMs) {
      invalid(`timeout_ms must be an integer from 1 to ${TERMINAL_LIMITS.maxTimeoutMs} (ms)`);
    }
  }
  if ((r.argv as string[]).some((a) => a.includes('\0'))) invalid('argv must not contain NUL');
  return r as unknown as TerminalRequest;
}

/** Collects up to `limit` bytes of a stream and drains the rest. */
function capture(stream: NodeJS.ReadableStream, limit: number): { text: () => string; truncated: () => boolean } {
  const chunks: Buffer[] = [];
  let size = 0;
  let truncated = false;
  stream.on('data', (chunk: Buffer) => {
    if (size >= limit) {
      truncated = true;
      return;
    }
    const take = chunk.subarray(0, limit - size);
    if (take.length < chunk.length) truncated = true;
    chunks.push(take);
    size += take.length;
  });
  return { text: () => Buffer.concat(chunks).toString('utf8'), truncated: () => truncated };
}

/**
 * Runs one request.
 * @param base the directory `cwd` is confined to
 * @throws FsError EINVAL (cwd outside the base or not a directory)
 */
export async function runTerminalRequest(req: TerminalRequest, base: string): Promise<TerminalResult> {
  const baseReal = await realpath(base);
  const wanted = req.cwd === undefined ? baseReal : resolve(baseReal, req.cwd);
  let cwd: string;
  try {
    cwd = await realpath(wanted);
  } catch {
    throw new FsError(Errno.EINVAL, `invalid terminal request: cwd ${req.cwd} does not exist`);
  }
  const rel = relative(baseReal, cwd);
  if (rel.startsWith('..') || isAbsolute(rel) || rel.split(sep).includes('..')) {
    throw new FsError(Errno.EINVAL, `invalid terminal request: cwd must stay inside the terminal's base directory`);
  }
  if (!(await stat(cwd)).isDirectory()) throw new FsError(Errno.EINVAL, `invalid terminal request: cwd ${req.cwd} is not a directory`);
  const timeoutMs = req.timeout_ms ?? TERMINAL_LIMITS.defaultTimeoutMs;
  const started = Date.now();
  return new Promise((resolvePromise) => {
    const child = spawn(req.argv[0], req.argv.slice(1), {
      cwd,
      // Exactly the environment given: nothing of the node's own environment (its tokens) leaks.
      env: { PATH: process.env.PATH ?? '/usr/local/bin:/usr/bin:/bin', ...req.env },
      shell: false,
      stdio: ['pipe', 'pipe', 'pipe'],
      detached: false,
    });
    const out = capture(child.stdout, TERMINAL_LIMITS.maxOutputBytes);
    const err = capture(child.stderr, TERMINAL_LIMITS.maxOutputBytes);
    let timedOut = false;
    const timer = setTimeout(() => {
      timedOut = true;
      child.kill('SIGKILL');
    }, timeoutMs);
    let spawnError: Error | null = null;
    child.on('error', (e) => (spawnError = e));
    child.stdin.on('error', () => undefined);
    child.stdin.end(req.stdin ?? '');
    child.on('close', (code, signal) => {
      clearTimeout(timer);
      const notFound = spawnError && (spawnError as NodeJS.ErrnoException).code === 'ENOENT';
      resolvePromise({
        exit_code: spawnError ? (notFound ? 127 : 126) : code,
        signal: signal ?? null,
        stdout: out.text(),
        stderr: spawnError ? `${req.argv[0]}: ${notFound ? 'program not found' : spawnError.message}\n` : err.text(),
        duration_ms: Date.now() - started,
        truncated: out.truncated() || err.truncated(),
        timed_out: timedOut,
      });
    });
  });
}

type NodeName = 'root' | 'readme' | 'control' | 'invoke' | 'result';

function nodeAt(path: readonly string[]): NodeName | null {
  if (path.length === 0) return 'root';
  if (path.length === 1) return path[0] === 'README.md' ? 'readme' : path[0] === 'control' ? 'control' : null;
  if (path.length === 2 && path[0] === 'control') return path[1] === 'invoke.json' ? 'invoke' : path[1] === 'last_result.json' ? 'result' : null;
  return null;
}

/** The terminal export; see module documentation. */
export class TerminalBackend implements FsBackend {
  readonly sourceKind = 'terminal';
  readonly caps: Record<string, unknown>;
  private lastResult: Buffer = Buffer.from('{}\n');
  private lastMtimeNs = Date.now() * 1e6;
  private running = 0;
  private readonly readme: Buffer;
  private readonly startedNs = Date.now() * 1e6;

  /**
   * @param terminalId the `--terminal-id`
   * @param base directory requests run in (`cwd` is confined to it)
   */
  constructor(
    readonly terminalId: string,
    private readonly base: string,
  ) {
    this.caps = { pty: true, invoke: true, terminal_id: terminalId };
    this.readme = Buffer.from(
      `# terminal ${terminalId}\n\n` +
        'Write a request to control/invoke.json, then read the result on the same handle,\n' +
        'or read control/last_result.json.\n\n' +
        '    {"argv":["sh","-c","echo hi"], "cwd":"sub/dir", "env":{"K":"V"}, "stdin":"...", "timeout_ms":30000}\n\n' +
        "No shell runs unless argv asks for one; cwd stays inside the terminal's base directory;\n" +
        'the environment is exactly env plus PATH; timeout_ms defaults to 30000 (at most 600000);\n' +
        'stdout and stderr keep their first 1 MiB each (truncated:true past it).\n\n' +
        'Result: {"exit_code", "signal", "stdout", "stderr", "duration_ms", "truncated", "timed_out"}\n',
    );
  }

  private statOf(node: NodeName): FsStat {
    const base = {
      nlink: 1,
      uid: process.getuid?.() ?? 0,
      gid: process.getgid?.() ?? 0,
      atimeNs: this.startedNs,
      ctimeNs: this.startedNs,
      mtimeNs: this.startedNs,
    };
    switch (node) {
      case 'root':
      case 'control':
        return { ...base, kind: 2, mode: DIR_MODE, nlink: 2, size: 0 };
      case 'readme':
        return { ...base, kind: 1, mode: README_MODE, size: this.readme.length };
      case 'invoke':
        return { ...base, kind: 1, mode: INVOKE_MODE, size: this.lastResult.length, mtimeNs: this.lastMtimeNs, ctimeNs: this.lastMtimeNs };
      case 'result':
        return { ...base, kind: 1, mode: RESULT_MODE, size: this.lastResult.length, mtimeNs: this.lastMtimeNs, ctimeNs: this.lastMtimeNs };
    }
  }

  private need(path: readonly string[]): NodeName {
    const node = nodeAt(path);
    if (!node) throw new FsError(Errno.ENOENT);
    return node;
  }

  async getattr(path: readonly string[]): Promise<FsStat> {
    return this.statOf(this.need(path));
  }

  async lookup(dir: readonly string[], name: string): Promise<FsStat> {
    return this.statOf(this.need([...dir, name]));
  }

  async readdir(dir: readonly string[]): Promise<string[]> {
    const node = this.need(dir);
    if (node === 'root') return ['README.md', 'control'];
    if (node === 'control') return ['invoke.json', 'last_result.json'];
    throw new FsError(Errno.ENOTDIR);
  }

  async lookupMany(dir: readonly string[], names: readonly string[]): Promise<Array<FsStat | null>> {
    return names.map((n) => {
      const node = nodeAt([...dir, n]);
      return node ? this.statOf(node) : null;
    });
  }

  async setattr(path: readonly string[], changes: FsAttrChanges): Promise<FsStat> {
    const node = this.need(path);
    if (changes.mode !== undefined || changes.uid !== undefined || changes.gid !== undefined)
      throw new FsError(Errno.EPERM, 'the terminal tree has fixed modes and owners');
    if (changes.size !== undefined && node !== 'invoke') throw new FsError(Errno.EACCES, 'only control/invoke.json is writable');
    return this.statOf(node);
  }

  async open(path: readonly string[], flags: number): Promise<{ file: FsOpenFile; stat: FsStat }> {
    const node = this.need(path);
    const access = flags & O_ACCMODE;
    const wantsWrite = access !== 0;
    if (node === 'root' || node === 'control') {
      if (wantsWrite) throw new FsError(Errno.EISDIR);
      return { file: this.staticFile(Buffer.alloc(0), true), stat: this.statOf(node) };
    }
    if (node !== 'invoke' && wantsWrite) throw new FsError(Errno.EACCES, 'only control/invoke.json is writable');
    if (node === 'readme') return { file: this.staticFile(this.readme), stat: this.statOf(node) };
    if (node === 'result') return { file: this.staticFile(this.lastResult), stat: this.statOf(node) };
    return { file: this.invokeFile(access !== 1, wantsWrite), stat: this.statOf(node) };
  }

  private staticFile(content: Buffer, isDir = false): FsOpenFile {
    let closed = false;
    return {
      readable: true,
      writable: false,
      async read(buffer, position) {
        if (closed) throw new FsError(Errno.EBADF);
        if (isDir) throw new FsError(Errno.EISDIR);
        return content.copy(buffer, 0, Math.min(position, content.length));
      },
      async write() {
        throw new FsError(Errno.EBADF);
      },
      async sync() {},
      async close() {
        closed = true;
      },
    };
  }

  /** A handle on control/invoke.json: collects the request; runs it on read or close. */
  private invokeFile(readable: boolean, writable: boolean): FsOpenFile {
    const chunks: Array<{ position: number; data: Buffer }> = [];
    let pending = false;
    let result: Buffer | null = null;
    let closed = false;
    const runPending = async (): Promise<void> => {
      if (!pending) return;
      pending = false;
      const size = chunks.reduce((m, c) => Math.max(m, c.position + c.data.length), 0);
      const doc = Buffer.alloc(size);
      for (const c of chunks) c.data.copy(doc, c.position);
      chunks.length = 0;
      const req = parseTerminalRequest(doc);
      if (this.running >= TERMINAL_LIMITS.maxConcurrent)
        throw new FsError(Errno.EAGAIN, `terminal ${this.terminalId} is running ${this.running} requests; retry later`);
      this.running++;
      try {
        const r = await runTerminalRequest(req, this.base);
        result = Buffer.from(`${JSON.stringify(r)}\n`);
        this.lastResult = result;
        this.lastMtimeNs = Date.now() * 1e6;
      } finally {
        this.running--;
      }
    };
    return {
      readable,
      writable,
      read: async (buffer, position) => {
        if (closed) throw new FsError(Errno.EBADF);
        await runPending();
        const content = result ?? this.lastResult;
        return content.copy(buffer, 0, Math.min(position, content.length));
      },
      write: async (data, position) => {
        if (closed) throw new FsError(Errno.EBADF);
        if (position + data.length > TERMINAL_LIMITS.maxRequestBytes)
          throw new FsError(Errno.EFBIG, `a terminal request is at most ${TERMINAL_LIMITS.maxRequestBytes} bytes`);
        chunks.push({ position, data: Buffer.from(data) });
        pending = true;
        result = null;
        return data.length;
      },
      sync: async () => runPending(),
      close: async () => {
        if (closed) return;
        try {
          await runPending();
        } finally {
          closed = true;
        }
      },
    };
  }

  /** O_CREAT on an existing entry opens it (as open(2) does); nothing new can be created. */
  async create(dir: readonly string[], name: string, _mode: number, flags: number): Promise<{ file: FsOpenFile; stat: FsStat; created: boolean }> {
    if (!nodeAt([...dir, name])) throw new FsError(Errno.EACCES, 'the terminal tree is fixed');
    if (flags & O_EXCL) throw new FsError(Errno.EEXIST);
    return { ...(await this.open([...dir, name], flags)), created: false };
  }
  async mkdir(): Promise<FsStat> {
    throw new FsError(Errno.EACCES, 'the terminal tree is fixed');
  }
  async symlink(): Promise<FsStat> {
    throw new FsError(Errno.EACCES, 'the terminal tree is fixed');
  }
  async readlink(path: readonly string[]): Promise<string> {
    this.need(path);
    throw new FsError(Errno.EINVAL);
  }
  async unlink(): Promise<void> {
    throw new FsError(Errno.EACCES, 'the terminal tree is fixed');
  }
  async rmdir(): Promise<void> {
    throw new FsError(Errno.EACCES, 'the terminal tree is fixed');
  }
  async rename(): Promise<void> {
    throw new FsError(Errno.EACCES, 'the terminal tree is fixed');
  }
  async statfs(): Promise<StatFs> {
    return { bsize: 4096, frsize: 4096, blocks: 0, bfree: 0, bavail: 0, files: 5, ffree: 0, namemax: 255 };
  }
}
