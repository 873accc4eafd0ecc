/**
 * e2e: the deployment files of deploy/ against the code. No container
 * engine runs here, so instead of building images this checks that everything the files rely
 * on exists in the programs they run:
 *
 * - Dockerfile: the stages (node:20-slim base, build tools for the native addons, libfuse 3 and
 *   fuse3 in the mount image, a non-root user in every runtime image), every COPY source,
 *   every ENTRYPOINT program, every CMD flag, the EXPOSEd ports, the HEALTHCHECK probe, every ENV;
 * - compose.yaml: PostgreSQL, two `svc` replicas with `--database-url`, two `svc-fs-node`s;
 *   their flags, ports, volumes, health checks, variables and the URLs between services;
 * - Kubernetes: a Deployment of two `svc` replicas with `livenessProbe` /livez and
 *   `readinessProbe` /readyz on the ops port, a Service, the Secrets every `secretKeyRef`
 *   names, and the `svc-fs-node` DaemonSet;
 * - and then for real: the Deployment's and compose's `svc` arguments start two replicas on
 *   one PostgreSQL (when installed), the DaemonSet's and compose's node arguments start two
 *   daemons; every probe path answers 200 on their ops ports, and every metric the Grafana
 *   dashboard queries is in the `/metrics` of the program it is about.
 *
 * Flags are checked against each program's `--help`; environment variables against the names
 * the built code reads (or the `$(VAR)` references of the same container). Transport: every
 * server listening beyond loopback serves TLS or says `--insecure-transport`, clients use
 * `wss://` exactly towards TLS servers, and the running check serves the Kubernetes files' TLS
 * with certificates of a test CA (openssl; without it that part runs without TLS and says so).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { parse, parseAllDocuments } from 'yaml';
import { BIN, cleanupTmp, killAll, ROOT, Running, startProcess, tmpDir, ADMIN_TOKEN, USER_TOKEN } from './support/processes';
import { Postgres, startPostgres } from './support/postgres';
import { makeCa, opensslMissing, TestCa } from './helpers/tls';
import { ControlClient, loadClientTls } from '../libs/client/src';

// eslint-disable-next-line @typescript-eslint/no-require-imports -- the package has no types; the cast gives the part used here
const parsePrometheus = require('parse-prometheus-text-format') as (text: string) => Array<{ name: string; type: string }>;

const DEPLOY = join(ROOT, 'deploy');
type Program = 'svc' | 'fs-node' | 'mount';
const PROGRAM_BIN: Record<Program, string> = { svc: BIN.svc, 'fs-node': BIN.fsNode, mount: BIN.fsMount };
/** Paths of the programs inside the images (WORKDIR /app) by program. */
const IMAGE_BIN: Record<Program, string> = {
  svc: '/app/dist/src/main.js',
  'fs-node': '/app/dist/apps/svc-fs-node/src/main.js',
  mount: '/app/dist/apps/svc-fs-mount/src/main.js',
};

/** Flags each program accepts, from its `--help`. */
const usage = new Map<Program, Set<string>>();
function flagsOf(program: Program): Set<string> {
  let flags = usage.get(program);
  if (!flags) {
    let text: string;
    try {
      text = execFileSync(process.execPath, [PROGRAM_BIN[program], '--help'], { encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    } catch (e) {
      const err = e as { stdout?: string; stderr?: string };
      text = `${err.stdout ?? ''}${err.stderr ?? ''}`;
    }
    flags = new Set(text.match(/--[a-z][a-z0-9-]*/g) ?? []);
    expect(flags.size).toBeGreaterThan(3);
    usage.set(program, flags);
  }
  return flags;
}

/** Environment variable names the built programs read (every SVC_* literal in dist). */
let codeEnv: Set<string> | null = null;
function envReadByCode(): Set<string> {
  if (codeEnv) return codeEnv;
  const names = new Set<string>();
  const walk = (dir: string) => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (p.endsWith('.js')) for (const m of readFileSync(p, 'utf8').match(/\bSVC_[A-Z0-9_]+\b/g) ?? []) names.add(m);
    }
  };
  for (const d of ['src', 'apps', 'libs']) walk(join(ROOT, 'dist', d));
  return (codeEnv = names);
}

/** The flags of an argument list (`--flag value` and `--flag=value`). */
function flagNames(args: string[]): string[] {
  return args.filter((a) => a.startsWith('--')).map((a) => a.split('=')[0]);
}

/** The value of `--flag` in an argument list, or undefined. */
function flag(args: string[], name: string): string | undefined {
  for (let i = 0; i < args.length; i++) {
    if (args[i] === name) return args[i + 1];
    if (args[i].startsWith(`${name}=`)) return args[i].slice(name.length + 1);
  }
  return undefined;
}

/** The same argument list with `--flag` values replaced (and `$(VAR)` references expanded). */
function adapt(args: string[], overrides: Record<string, string>, vars: Record<string, string> = {}): string[] {
  const out = args.map((a) => a.replace(/\$\(([A-Z0-9_]+)\)/g, (_m, v: string) => vars[v] ?? `$(${v})`));
  for (let i = 0; i < out.length; i++) if (out[i] in overrides) out[i + 1] = overrides[out[i]];
  return out;
}

/** Checks one container's flags against its program and its variables against the code. */
function checkContainer(where: string, program: Program, args: string[], env: string[]): void {
  const known = flagsOf(program);
  for (const f of flagNames(args)) expect({ where, flag: f, known: known.has(f) }).toEqual({ where, flag: f, known: true });
  const referenced = new Set([...args.join(' ').matchAll(/\$\(([A-Z0-9_]+)\)/g)].map((m) => m[1]));
  for (const v of referenced) expect({ where, reference: v, defined: env.includes(v) }).toEqual({ where, reference: v, defined: true });
  for (const name of env) {
    const used = envReadByCode().has(name) || referenced.has(name);
    expect({ where, env: name, used }).toEqual({ where, env: name, used: true });
  }
}

const LOOPBACK = /^(127\.|::1$|localhost$)/;

/**
 * Secure by default (docs/operations.md "Transport security (TLS)"): a server whose `--bind` is beyond loopback serves TLS
 * (`--tls-cert` and `--tls-key`) or says `--insecure-transport`.
 * @returns whether it serves TLS
 */
function checkTransport(where: string, args: string[]): boolean {
  const tls = flag(args, '--tls-cert') !== undefined;
  expect({ where, cert: tls, key: flag(args, '--tls-key') !== undefined }).toEqual({ where, cert: tls, key: tls });
  const insecure = args.includes('--insecure-transport');
  expect({ where, both: tls && insecure }).toEqual({ where, both: false });
  const bind = flag(args, '--bind') ?? '127.0.0.1';
  if (!LOOPBACK.test(bind)) expect({ where, bind, tlsOrInsecure: tls || insecure }).toEqual({ where, bind, tlsOrInsecure: true });
  return tls;
}

/** A URL's scheme matches the transport of the server it names. */
function checkScheme(where: string, url: string, tls: boolean, scheme: 'ws' | 'http' = 'ws'): void {
  expect({ where, url, scheme: new URL(url).protocol }).toEqual({ where, url, scheme: `${scheme}${tls ? 's' : ''}:` });
}

// ---- the files ----------------------------------------------------------------------------

interface DockerStage {
  name: string;
  from: string;
  lines: Array<{ op: string; rest: string }>;
}

/** Dockerfile instructions by stage (continuation lines joined, comments dropped). */
function dockerStages(): { args: Record<string, string>; stages: DockerStage[] } {
  const text = readFileSync(join(DEPLOY, 'Dockerfile'), 'utf8').replace(/\\\n/g, ' ');
  const args: Record<string, string> = {};
  const stages: DockerStage[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const [, op, rest] = /^(\S+)\s+(.*)$/.exec(line)!;
    if (op === 'ARG' && stages.length === 0) {
      const [k, v] = rest.split('=');
      args[k] = v;
    } else if (op === 'FROM') {
      const m = /^(\S+)\s+AS\s+(\S+)$/i.exec(rest)!;
      stages.push({ name: m[2], from: m[1].replace(/\$\{(\w+)\}/g, (_x, k: string) => args[k]), lines: [] });
    } else stages[stages.length - 1].lines.push({ op: op.toUpperCase(), rest });
  }
  return { args, stages };
}

/** A stage's instructions including those of the stages it builds on. */
function chain(stages: DockerStage[], name: string): DockerStage['lines'] {
  const st = stages.find((s) => s.name === name)!;
  const parent = stages.find((s) => s.name === st.from);
  return [...(parent ? chain(stages, parent.name) : []), ...st.lines];
}

/** ENV instructions (`K=V K2=V2` form) of a chain. */
function envOf(lines: DockerStage['lines']): Record<string, string> {
  const env: Record<string, string> = {};
  for (const l of lines.filter((x) => x.op === 'ENV')) for (const m of l.rest.matchAll(/(\w+)=(\S+)/g)) env[m[1]] = m[2];
  return env;
}

function jsonForm(lines: DockerStage['lines'], op: string): string[] {
  const l = [...lines].reverse().find((x) => x.op === op);
  return l ? (JSON.parse(l.rest) as string[]) : [];
}

type Obj = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- parsed YAML manifests, read untyped

const compose = (): Obj => parse(readFileSync(join(DEPLOY, 'compose.yaml'), 'utf8'), { merge: true }) as Obj;
function k8s(): Obj[] {
  const docs: Obj[] = [];
  for (const f of readdirSync(join(DEPLOY, 'k8s')).filter((n) => n.endsWith('.yaml'))) {
    for (const d of parseAllDocuments(readFileSync(join(DEPLOY, 'k8s', f), 'utf8'))) {
      expect(d.errors).toEqual([]);
      const v = d.toJS() as Obj | null;
      if (v) docs.push({ ...v, __file: f });
    }
  }
  return docs;
}
const grafana = (): Obj => JSON.parse(readFileSync(join(DEPLOY, 'grafana', 'svc-dashboard.json'), 'utf8')) as Obj;

/** Every probe path the files use, with where. */
const probePaths = new Map<string, string>();

describe('deploy/Dockerfile', () => {
  const { stages } = dockerStages();
  const byName = (n: string) => stages.find((s) => s.name === n);

  it('builds on node:20-slim in stages, compiling the native addons from source', () => {
    expect(stages.map((s) => s.name)).toEqual(expect.arrayContaining(['build', 'runtime', 'svc', 'fs-node', 'mount']));
    for (const s of stages) expect(s.from === 'node:20-slim' || stages.some((p) => p.name === s.from)).toBe(true);
    const build = byName('build')!
      .lines.map((l) => `${l.op} ${l.rest}`)
      .join('\n');
    for (const tool of ['python3', 'make', 'g++']) expect(build).toMatch(new RegExp(`apt-get install[^\\n]*\\s${tool.replace('+', '\\+')}(\\s|$)`));
    expect(build).toMatch(/npm_config_build_from_source=true/);
    expect(build).toMatch(/RUN npm ci\b/);
    expect(build).toMatch(/npm run build/);
    expect(build).toMatch(/npm prune --omit=dev/);
    // the runtime images carry no compiler
    expect(chain(stages, 'svc').some((l) => /g\+\+|make|python3/.test(l.rest) && l.op === 'RUN')).toBe(false);
    const mount = chain(stages, 'mount')
      .map((l) => l.rest)
      .join('\n');
    expect(mount).toMatch(/apt-get install[^\n]*\blibfuse3-3\b/);
    expect(mount).toMatch(/apt-get install[^\n]*\bfuse3\b/);
  });

  it('copies only files that exist, and runs every image as a non-root user', () => {
    for (const s of stages) {
      for (const l of s.lines.filter((x) => x.op === 'COPY' && !x.rest.startsWith('--from'))) {
        const parts = l.rest.split(/\s+/);
        for (const src of parts.slice(0, -1)) expect({ copy: src, exists: existsSync(join(ROOT, src)) }).toEqual({ copy: src, exists: true });
      }
    }
    for (const name of ['svc', 'fs-node', 'mount']) {
      const users = chain(stages, name).filter((l) => l.op === 'USER');
      expect(users.length).toBeGreaterThan(0);
      const last = users[users.length - 1].rest;
      expect({ stage: name, user: last, root: /^(0|root)(:|$)/.test(last) }).toEqual({ stage: name, user: last, root: false });
    }
  });

  it('starts programs that exist, with flags they accept, on the ports it exposes', () => {
    for (const program of ['svc', 'fs-node', 'mount'] as Program[]) {
      const lines = chain(stages, program);
      const entry = jsonForm(lines, 'ENTRYPOINT');
      expect(entry).toEqual(['node', IMAGE_BIN[program]]);
      expect(existsSync(join(ROOT, IMAGE_BIN[program].replace(/^\/app\//, '')))).toBe(true);
      const cmd = jsonForm(lines, 'CMD');
      const env = envOf(lines);
      checkContainer(`Dockerfile ${program}`, program, cmd, Object.keys(env));
      if (program === 'mount') continue;
      // secure by default: the images' own commands serve TLS from /etc/svc/tls
      expect(checkTransport(`Dockerfile ${program}`, cmd)).toBe(true);
      const exposed = lines.filter((l) => l.op === 'EXPOSE').flatMap((l) => l.rest.split(/\s+/));
      expect(exposed.sort()).toEqual([flag(cmd, '--port'), env.SVC_METRICS_PORT].sort());
    }
    const svc = chain(stages, 'svc');
    const health = svc.find((l) => l.op === 'HEALTHCHECK')!.rest;
    const url = /http:\/\/127\.0\.0\.1:(\d+)(\/\w+)/.exec(health)!;
    expect(url[1]).toBe(envOf(svc).SVC_METRICS_PORT);
    probePaths.set(url[2], 'Dockerfile HEALTHCHECK');
    expect(envOf(svc).SVC_STATE_DIR).toBe('/var/lib/svc');
  });
});

describe('deploy/compose.yaml', () => {
  const c = compose();
  const services = c.services as Record<string, Obj>;
  const ofTarget = (t: string) => Object.entries(services).filter(([, s]) => s.build?.target === t);

  it('runs PostgreSQL, two svc replicas on it and two svc-fs-node daemons', () => {
    expect(services.postgres.image).toMatch(/^postgres:\d+/);
    const svcs = ofTarget('svc');
    const nodes = ofTarget('fs-node');
    expect(svcs.map(([n]) => n)).toHaveLength(2);
    expect(nodes.map(([n]) => n)).toHaveLength(2);
    for (const [, s] of [...svcs, ...nodes, ...ofTarget('mount')]) expect(s.build.dockerfile).toBe('deploy/Dockerfile');
    expect(existsSync(join(DEPLOY, services[svcs[0][0]].build.context, 'package.json'))).toBe(true);
    for (const [name, s] of svcs) {
      const url = flag(s.command, '--database-url')!;
      expect({ name, url }).toEqual({ name, url: expect.stringMatching(/^postgres:\/\/svc:\$\{POSTGRES_PASSWORD[^}]*\}@postgres:5432\/svc$/) });
      expect(services.postgres.environment.POSTGRES_DB).toBe('svc');
      expect(services.postgres.environment.POSTGRES_USER).toBe('svc');
      expect(s.depends_on.postgres.condition).toBe('service_healthy');
    }
  });

  it('uses flags, ports, volumes, health checks and variables that exist', () => {
    const ports = new Map<string, string>();
    const tlsOf = new Map<string, boolean>();
    for (const [name, s] of Object.entries(services)) {
      const target = s.build?.target as Program | undefined;
      if (!target) continue;
      const args = (s.command as string[] | undefined) ?? [];
      const env = Object.keys(s.environment ?? {});
      checkContainer(`compose ${name}`, target, args, env);
      if (target === 'mount') continue;
      tlsOf.set(name, checkTransport(`compose ${name}`, args));
      const port = flag(args, '--port')!;
      ports.set(name, port);
      // without TLS the ports are published on the host's loopback only
      if (!tlsOf.get(name))
        for (const p of (s.ports as string[] | undefined) ?? [])
          expect({ name, published: p }).toEqual({ name, published: expect.stringMatching(/^127\.0\.0\.1:/) });
      for (const p of (s.ports as string[] | undefined) ?? []) expect(p.split(':').pop()).toBe(port);
      const probe = (s.healthcheck.test as string[]).join(' ');
      const m = /http:\/\/127\.0\.0\.1:(\d+)(\/\w+)/.exec(probe)!;
      expect({ name, port: m[1] }).toEqual({ name, port: s.environment.SVC_METRICS_PORT });
      probePaths.set(m[2], `compose ${name} healthcheck`);
      const mounts = ((s.volumes as string[] | undefined) ?? []).map((v) => v.split(':')[1]);
      if (target === 'svc') expect(mounts).toContain(flag(args, '--state-dir'));
      else {
        expect(mounts).toContain(flag(args, '--state-file')!.replace(/\/[^/]+$/, ''));
        expect(mounts).toContain(
          flag(args, '--export')!
            .split('=')[1]
            .replace(/:(ro|rw)$/, ''),
        );
      }
      for (const v of (s.volumes as string[] | undefined) ?? []) expect(Object.keys(c.volumes)).toContain(v.split(':')[0]);
    }
    // the nodes reach an svc service on its port, and advertise their own service name and port
    for (const [name, s] of ofTarget('fs-node')) {
      const control = new URL(flag(s.command, '--control-url')!);
      expect(ports.get(control.hostname)).toBe(control.port);
      checkScheme(`compose ${name} --control-url`, control.href, tlsOf.get(control.hostname)!);
      checkScheme(`compose ${name} --fs-url`, flag(s.command, '--fs-url')!, tlsOf.get(name)!);
      expect(services[control.hostname].build.target).toBe('svc');
      expect(s.depends_on[control.hostname].condition).toBe('service_healthy');
      const fs = new URL(flag(s.command, '--fs-url')!);
      expect({ name, host: fs.hostname, port: fs.port, path: fs.pathname }).toEqual({ name, host: name, port: ports.get(name), path: '/v2/fs' });
      expect(flag(s.command, '--pair-mode')).toBe('request');
    }
    const mountUrl = new URL(services.mount.environment.SVC_URL);
    expect(ports.get(mountUrl.hostname)).toBe(mountUrl.port);
    checkScheme('compose mount SVC_URL', mountUrl.href, tlsOf.get(mountUrl.hostname)!);
  });
});

describe('deploy/k8s', () => {
  const docs = k8s();
  const kind = (k: string, name: string) => docs.find((d) => d.kind === k && d.metadata.name === name)!;
  const secrets = docs.filter((d) => d.kind === 'Secret');

  /** Checks a pod template's containers; returns the container. */
  function checkPod(where: string, template: Obj, program: Program): Obj {
    expect(template.spec.securityContext.runAsNonRoot).toBe(true);
    expect(template.spec.securityContext.runAsUser).not.toBe(0);
    const [container] = template.spec.containers as Obj[];
    const env = (container.env as Obj[]).map((e) => e.name as string);
    checkContainer(where, program, container.args, env);
    for (const e of container.env as Obj[]) {
      const ref = e.valueFrom?.secretKeyRef;
      if (!ref) continue;
      const secret = secrets.find((s) => s.metadata.name === ref.name);
      expect({ where, secret: ref.name, key: ref.key, found: Boolean(secret?.stringData?.[ref.key] ?? secret?.data?.[ref.key]) }).toEqual({
        where,
        secret: ref.name,
        key: ref.key,
        found: true,
      });
    }
    const ports = new Map((container.ports as Obj[]).map((p) => [p.name as string, String(p.containerPort)]));
    const metricsPort = (container.env as Obj[]).find((e) => e.name === 'SVC_METRICS_PORT')!.value;
    expect(ports.get('ops')).toBe(metricsPort);
    expect([...ports.values()]).toContain(flag(container.args, '--port'));
    for (const probe of ['livenessProbe', 'readinessProbe', 'startupProbe']) {
      const p = container[probe]?.httpGet;
      if (!p) continue;
      expect(ports.has(p.port)).toBe(true);
      expect(ports.get(p.port)).toBe(metricsPort);
      probePaths.set(p.path, `${where} ${probe}`);
    }
    expect(container.livenessProbe.httpGet.path).toBe('/livez');
    expect(container.readinessProbe.httpGet.path).toBe('/readyz');
    const mounts = (container.volumeMounts as Obj[]).map((m) => m.mountPath as string);
    const volumes = (template.spec.volumes as Obj[]).map((v) => v.name as string);
    for (const m of container.volumeMounts as Obj[]) expect(volumes).toContain(m.name);
    const tls = checkTransport(where, container.args);
    // certificate, key and CA files come from a mounted volume
    for (const f of ['--tls-cert', '--tls-key', '--tls-ca']) {
      const file = flag(container.args, f);
      if (file) expect({ where, file, mounted: mounts.some((m) => file.startsWith(`${m}/`)) }).toEqual({ where, file, mounted: true });
    }
    return { ...container, mounts, tls };
  }

  it('has a Deployment of two svc replicas with /livez and /readyz probes on the ops port', () => {
    const d = kind('Deployment', 'svc');
    expect(d.spec.replicas).toBe(2);
    for (const [k, v] of Object.entries(d.spec.selector.matchLabels)) expect(d.spec.template.metadata.labels[k]).toBe(v);
    const c = checkPod('Deployment svc', d.spec.template, 'svc');
    expect(c.tls).toBe(true);
    const certMount = (c.volumeMounts as Obj[]).find((m) => flag(c.args, '--tls-cert')!.startsWith(`${m.mountPath}/`));
    expect(certMount).toBeDefined();
    const tlsVolume = (d.spec.template.spec.volumes as Obj[]).find((v) => v.name === certMount!.name);
    expect(tlsVolume).toBeDefined();
    const tlsSecret = docs.find((x) => x.kind === 'Secret' && x.metadata.name === tlsVolume!.secret.secretName)!;
    expect(tlsSecret.type).toBe('kubernetes.io/tls');
    for (const f of ['--tls-cert', '--tls-key', '--tls-ca'])
      expect(Object.keys(tlsSecret.stringData ?? tlsSecret.data)).toContain(flag(c.args, f)!.split('/').pop());
    expect(flag(c.args, '--database-url')).toBe('$(SVC_DATABASE_URL)');
    expect(c.mounts).toContain(flag(c.args, '--state-dir'));
    for (const name of ['SVC_ADMIN_TOKEN', 'SVC_USER_TOKEN', 'SVC_CONTROL_STATE_KEY_HEX', 'SVC_DATABASE_URL']) {
      expect((c.env as Obj[]).find((e) => e.name === name)?.valueFrom?.secretKeyRef).toBeDefined();
    }
  });

  it("has a Service on the Deployment's named ports", () => {
    const d = kind('Deployment', 'svc');
    const s = kind('Service', 'svc');
    for (const [k, v] of Object.entries(s.spec.selector)) expect(d.spec.template.metadata.labels[k]).toBe(v);
    const names = (d.spec.template.spec.containers[0].ports as Obj[]).map((p) => p.name);
    for (const p of s.spec.ports as Obj[]) expect(names).toContain(p.targetPort);
  });

  it('has an svc-fs-node DaemonSet that reaches the Service', () => {
    const ds = kind('DaemonSet', 'svc-fs-node');
    const c = checkPod('DaemonSet svc-fs-node', ds.spec.template, 'fs-node');
    const svcTls = flag(kind('Deployment', 'svc').spec.template.spec.containers[0].args, '--tls-cert') !== undefined;
    checkScheme('DaemonSet --control-url', flag(c.args, '--control-url')!, svcTls);
    checkScheme('DaemonSet --fs-url', flag(c.args, '--fs-url')!.replace(/\$\(\w+\)/, '10.0.0.1'), c.tls);
    if (svcTls) expect(flag(c.args, '--tls-ca')).toBeDefined();
    const control = new URL(flag(c.args, '--control-url')!);
    const service = kind('Service', control.hostname);
    expect((service.spec.ports as Obj[]).some((p) => String(p.port) === control.port)).toBe(true);
    const fsUrl = new URL(flag(c.args, '--fs-url')!.replace(/\$\(\w+\)/, '10.0.0.1'));
    // advertised on the host's address: the FS port is a host port
    if (/\$\(HOST_IP\)/.test(flag(c.args, '--fs-url')!))
      expect((c.ports as Obj[]).find((p) => String(p.containerPort) === fsUrl.port)?.hostPort).toBe(Number(fsUrl.port));
    expect(fsUrl.port).toBe(flag(c.args, '--port'));
    expect(fsUrl.pathname).toBe('/v2/fs');
    expect(c.mounts).toContain(flag(c.args, '--state-file')!.replace(/\/[^/]+$/, ''));
    expect(c.mounts).toContain(flag(c.args, '--export')!.split('=')[1]);
  });

  it('keeps the state key and the role tokens in Secrets', () => {
    const keys = secrets.flatMap((s) => Object.keys(s.stringData ?? s.data ?? {}));
    expect(keys).toEqual(expect.arrayContaining(['admin-token', 'user-token', 'state-key-hex']));
  });
});

describe('the deployment running for real', () => {
  let pg: Postgres | null = null;
  let ca: TestCa | null = null;
  const running: Record<string, Running> = {};

  beforeAll(async () => {
    pg = await startPostgres();
    const missing = opensslMissing();
    if (missing) process.stderr.write(`deploy e2e: ${missing}: the Kubernetes files' TLS arguments are run without TLS\n`);
    else ca = makeCa('svc deploy test CA');
  }, 60_000);

  afterAll(async () => {
    await killAll();
    await pg?.close();
    cleanupTmp();
  });

  /** An argument list without the given flags (and their values). */
  const without = (args: string[], names: string[]) => args.filter((a, i) => !names.includes(a) && !names.includes(args[i - 1]));

  /** The TLS flags of a file pointed at a test certificate (or dropped without openssl). */
  const tlsFiles = (args: string[], name: string): string[] => {
    if (flag(args, '--tls-cert') === undefined) return args;
    if (!ca) return without(args, ['--tls-cert', '--tls-key', '--tls-ca']);
    const c = ca.issue(name);
    return adapt(args, { '--tls-cert': c.cert, '--tls-key': c.key, '--tls-ca': ca.cert });
  };

  it("starts both svc replicas and both nodes with the files' arguments; they pair; every probe path answers", async () => {
    const docs = k8s();
    const deployment = docs.find((d) => d.kind === 'Deployment' && d.metadata.name === 'svc')!.spec.template.spec.containers[0];
    const daemonset = docs.find((d) => d.kind === 'DaemonSet')!.spec.template.spec.containers[0];
    const services = compose().services as Record<string, Obj>;
    const dbUrl = pg ? await pg.newDatabase() : null;
    const env = { SVC_ADMIN_TOKEN: ADMIN_TOKEN, SVC_USER_TOKEN: USER_TOKEN, SVC_METRICS_PORT: '0', SVC_LOG_LEVEL: 'info' };
    // loopback instead of 0.0.0.0 (tests listen on this machine only), port 0, a temp state dir
    const svcArgs = (args: string[], name: string) => {
      const a = tlsFiles(
        adapt(
          args,
          { '--bind': '127.0.0.1', '--port': '0', '--state-dir': tmpDir('deploy-svc-'), '--database-url': dbUrl ?? '' },
          { SVC_DATABASE_URL: dbUrl ?? '' },
        ),
        name,
      );
      // no PostgreSQL here: the embedded store, and the replica-only checks below are skipped
      return dbUrl ? a : without(a, ['--database-url']);
    };
    running.k8sSvc = await startProcess(BIN.svc, svcArgs(deployment.args, 'svc'), env);
    expect(running.k8sSvc.url.startsWith(ca ? 'wss://' : 'ws://')).toBe(true);
    // the compose replica shares the database (with the embedded store: its own directory)
    running.composeSvc = await startProcess(BIN.svc, svcArgs(services['svc-1'].command, 'svc-1'), env);
    const nodeArgs = (args: string[], name: string, svc: Running) => {
      const dir = tmpDir(`deploy-${name}-`);
      mkdirSync(join(dir, 'work'));
      const tls = flag(args, '--tls-cert') !== undefined && ca !== null;
      return tlsFiles(
        adapt(
          args,
          {
            '--bind': '127.0.0.1',
            '--port': '0',
            '--control-url': svc.url,
            '--fs-url': `${tls ? 'wss' : 'ws'}://127.0.0.1:1/v2/fs`,
            '--state-file': join(dir, 'state.json'),
            '--export': `work=${join(dir, 'work')}`,
          },
          { NODE_NAME: name, HOST_IP: '127.0.0.1', POD_IP: '127.0.0.1' },
        ),
        name,
      );
    };
    const nodeEnv = { SVC_AUTH_TOKEN: USER_TOKEN, SVC_METRICS_PORT: '0', SVC_LOG_LEVEL: 'info' };
    const k8sNodeArgs = nodeArgs(daemonset.args, 'k8s-node', running.k8sSvc);
    const composeNodeArgs = nodeArgs(services['fs-node-1'].command, 'compose-node', running.composeSvc);
    running.k8sNode = await startProcess(BIN.fsNode, k8sNodeArgs, nodeEnv);
    running.composeNode = await startProcess(BIN.fsNode, composeNodeArgs, nodeEnv);
    // each node reached its svc (wss:// with the CA of the files for the Kubernetes one) and
    // filed its join request with the user token, as deployed
    for (const [svc, node] of [
      [running.k8sSvc, flag(k8sNodeArgs, '--node-name')!],
      [running.composeSvc, flag(composeNodeArgs, '--node-name')!],
    ] as const) {
      const admin = await ControlClient.connect({ url: svc.url, token: ADMIN_TOKEN, tls: ca ? loadClientTls(ca.cert) : undefined });
      try {
        const deadline = Date.now() + 10_000;
        let names: string[] = [];
        while (Date.now() < deadline && !names.includes(node)) {
          names = (await admin.request<{ pending: Array<{ node_name: string }> }>('node_join_pending_list')).pending.map((p) => p.node_name);
          if (!names.includes(node)) await new Promise((r) => setTimeout(r, 100));
        }
        expect({ svc: svc.url, pending: names }).toEqual({ svc: svc.url, pending: expect.arrayContaining([node]) });
      } finally {
        admin.close();
      }
    }
    for (const [name, r] of Object.entries(running))
      expect({ name, ops: r.opsUrl }).toEqual({ name, ops: expect.stringMatching(/^http:\/\/127\.0\.0\.1:\d+$/) });
    // every probe path of the files (collected by the checks above), each on every program
    for (const path of new Set(['/livez', '/readyz', ...probePaths.keys()])) {
      for (const [name, r] of Object.entries(running)) {
        const deadline = Date.now() + 10_000;
        let status = 0;
        while (Date.now() < deadline) {
          status = (await fetch(`${r.opsUrl}${path}`)).status;
          if (status === 200) break;
          await new Promise((res) => setTimeout(res, 100));
        }
        expect({ name, path, status }).toEqual({ name, path, status: 200 });
      }
    }
  }, 60_000);

  it('exports every metric the Grafana dashboard queries', async () => {
    const families = async (r: Running) => new Map(parsePrometheus(await (await fetch(`${r.opsUrl}/metrics`)).text()).map((f) => [f.name, f.type]));
    const svcMetrics = await families(running.k8sSvc);
    const nodeMetrics = await families(running.k8sNode);
    const g = grafana();
    const queries: Array<{ where: string; expr: string }> = [];
    const walk = (panels: Obj[]) => {
      for (const p of panels) {
        if (p.type !== 'row') {
          expect({ panel: p.title, targets: (p.targets ?? []).length > 0 }).toEqual({ panel: p.title, targets: true });
        }
        for (const t of p.targets ?? []) queries.push({ where: `panel "${p.title}" ${t.refId}`, expr: t.expr });
        walk(p.panels ?? []);
      }
    };
    walk(g.panels);
    for (const v of g.templating.list as Obj[])
      if (v.type === 'query') queries.push({ where: `variable ${v.name}`, expr: typeof v.query === 'string' ? v.query : v.query.query });
    const variables = new Set((g.templating.list as Obj[]).map((v) => v.name as string));
    let checked = 0;
    for (const { where, expr } of queries) {
      const names = expr.match(/\b(?:svc|process|nodejs)_[a-z0-9_]+\b/g) ?? [];
      expect({ where, metrics: names.length > 0 }).toEqual({ where, metrics: true });
      for (const v of expr.match(/\$(\w+)/g) ?? [])
        expect({ where, variable: v, defined: variables.has(v.slice(1)) }).toEqual({ where, variable: v, defined: true });
      for (const raw of names) {
        const isFs = raw.startsWith('svc_fs_') || /\$fs_job/.test(expr);
        const exported = isFs ? nodeMetrics : svcMetrics;
        const base = exported.has(raw) ? raw : raw.replace(/_(bucket|sum|count)$/, '');
        const ok = exported.has(base) && (base === raw || exported.get(base) === 'HISTOGRAM' || exported.get(base) === 'SUMMARY');
        expect({ where, metric: raw, exportedBy: isFs ? 'svc-fs-node' : 'svc', ok }).toEqual({
          where,
          metric: raw,
          exportedBy: isFs ? 'svc-fs-node' : 'svc',
          ok: true,
        });
        checked++;
      }
    }
    expect(checked).toBeGreaterThan(20);
  });
});
