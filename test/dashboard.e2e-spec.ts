/**
 * e2e: the web dashboard in a real browser:
 * Debian's headless Chromium driven by playwright-core, against the built `svc` with two
 * real `svc-fs-node` daemons and a project (test/helpers/workspace.ts).
 *
 * Covers: a page without a session shows the sign-in page and no data; a wrong token is
 * refused and logged without the token; signing in shows both nodes and the project's mounts;
 * SIGTERM of a node's daemon (it releases its lease) turns its mounts `degraded` (the word)
 * and puts the event in the feed within 3 s, without a reload; a pending join approved with
 * the button makes the node appear; a WebSocket opened from another origin is refused (in the
 * browser and with the cookie from a plain client); sign-in attempts are rate limited;
 * signing out ends the session. Screenshots go to a temp dir printed at the end. With TLS
 * (`--tls-cert`, certificates of a test CA), the dashboard is served on the same `https://`
 * port with a `Secure` cookie that opens `wss://` from its own origin only.
 *
 * Chromium absent (`/usr/bin/chromium`; `.ci/run` installs it): skipped with the reason
 * printed. Chromium present but not starting: the tests fail.
 */
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { createServer, Server } from 'node:http';
import { request as httpsRequest } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Browser, BrowserContext, Page } from 'playwright-core';
import NodeWebSocket from 'ws';
import { ADMIN_TOKEN, cleanupTmp, killAll, Running, startNodeDaemon, startSvc, tmpDir, USER_TOKEN, waitFor } from './support/processes';
import { describeWithOpenssl, makeCa } from './helpers/tls';
import { startWorkspace, Workspace } from './helpers/workspace';

/**
 * The browser's globals that the functions given to `page.evaluate` and `page.waitForFunction`
 * use: those functions run in the page, where these exist. Declared here, for this file only,
 * as the Node project is compiled without the DOM library.
 */
interface PageElement {
  textContent: string | null;
  getAttribute(name: string): string | null;
}
declare const document: {
  querySelector(selector: string): PageElement | null;
  querySelectorAll(selector: string): Iterable<PageElement>;
  getElementById(id: string): PageElement | null;
};
declare const window: object;

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_ARGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];
const haveChromium = existsSync(CHROMIUM);
if (!haveChromium) {
  console.warn(`dashboard e2e skipped: ${CHROMIUM} not found (Debian: apt-get install chromium; .ci/run installs it)`);
}
const suite = haveChromium ? describe : describe.skip;

/** Status of a WebSocket upgrade on `url` with `headers`: 101 when it opened. `ca`: PEM trusted for wss://. */
function upgradeStatus(url: string, headers: Record<string, string>, ca?: Buffer): Promise<number> {
  return new Promise((resolve, reject) => {
    const ws = new NodeWebSocket(url, { headers, ca });
    ws.once('open', () => {
      ws.close();
      resolve(101);
    });
    ws.once('unexpected-response', (_req, res) => {
      resolve(res.statusCode ?? 0);
      res.resume();
      ws.terminate();
    });
    ws.once('error', (e) => reject(e));
  });
}

/** Opens a WebSocket to `url` from page `p`, with the browser's own WebSocket: `open`, or `refused` when it fails. */
function browserWebSocket(p: Page, url: string): Promise<string> {
  return p.evaluate(
    (u) =>
      new Promise<string>((resolve) => {
        const s = new (globalThis as unknown as { WebSocket: new (u: string) => { onopen: () => void; onerror: () => void } }).WebSocket(u);
        s.onopen = () => resolve('open');
        s.onerror = () => resolve('refused');
      }),
    url,
  );
}

suite('web dashboard in headless Chromium', () => {
  let ws: Workspace;
  let base: string;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let shots: string;
  let shot = 0;
  let otherOrigin: Server;
  let nodeC: Running | null = null;

  const screenshot = async (p: Page, name: string) => {
    await p.screenshot({ path: join(shots, `${String(++shot).padStart(2, '0')}-${name}.png`), fullPage: true });
  };

  beforeAll(async () => {
    ws = await startWorkspace();
    base = ws.svc.url.replace(/^ws/, 'http').replace(/\/$/, '');
    shots = mkdtempSync(join(tmpdir(), 'svc-dashboard-shots-'));
    // Fails the suite (no skip) when Chromium is installed but cannot start.
    browser = await (await import('playwright-core')).chromium.launch({ executablePath: CHROMIUM, args: CHROMIUM_ARGS, timeout: 30_000 });
    context = await browser.newContext({ viewport: { width: 1280, height: 900 } });
    page = await context.newPage();
    // A page of another origin on this host (same site, so a SameSite cookie would be sent):
    // it tries to open the svc WebSocket.
    otherOrigin = createServer((_req, res) => {
      res.writeHead(200, { 'Content-Type': 'text/html' });
      res.end('<!doctype html><title>other origin</title><p>another site</p>');
    });
    await new Promise<void>((r) => otherOrigin.listen(0, '127.0.0.1', () => r()));
  }, 90_000);

  afterAll(async () => {
    await browser?.close().catch(() => undefined);
    otherOrigin?.close();
    ws?.close();
    await killAll();
    cleanupTmp();
    if (shots) console.log(`dashboard screenshots: ${shots}`);
  });

  it('shows the sign-in page and no data without a session', async () => {
    const anon = await browser.newContext();
    const p = await anon.newPage();
    const res = await p.goto(`${base}/ui/`);
    expect(res?.status()).toBe(200);
    expect(res?.headers()['content-security-policy']).toContain("script-src 'self'");
    await p.waitForSelector('#token');
    const html = await p.content();
    for (const secretOrData of ['node-a', 'node-b', ws.nodeIds.a, ws.nodeIds.b, ws.project.project_id, '/shared', ADMIN_TOKEN])
      expect(html).not.toContain(secretOrData);
    await screenshot(p, 'sign-in');
    // the dashboard's scripts and its WebSocket need the session too
    expect((await anon.request.get(`${base}/ui/app.js`)).status()).toBe(401);
    expect(await browserWebSocket(p, ws.svc.url)).toBe('refused');
    // a browser on the bare port is sent to the dashboard
    expect((await anon.request.get(`${base}/`, { headers: { Accept: 'text/html' }, maxRedirects: 0 })).headers().location).toBe('/ui/');
    await anon.close();
  });

  it('refuses a wrong token at sign-in and logs the refusal without the token', async () => {
    const wrong = 'not-the-admin-token-' + 'x'.repeat(20);
    await page.goto(`${base}/ui/`);
    await page.fill('#token', wrong);
    const [res] = await Promise.all([page.waitForResponse((r) => r.url().endsWith('/ui/sign-in')), page.click('#sign-in')]);
    expect(res.status()).toBe(401);
    await expect(page.textContent('#notice')).resolves.toContain('not the admin token');
    // the user token is not enough either: admin only
    await page.fill('#token', USER_TOKEN);
    const [res2] = await Promise.all([page.waitForResponse((r) => r.url().endsWith('/ui/sign-in')), page.click('#sign-in')]);
    expect(res2.status()).toBe(401);
    expect(await context.cookies()).toEqual([]);
    await waitFor(() => (ws.svc.stderr().match(/dashboard sign-in refused/g) ?? []).length >= 2, 3000);
    expect(ws.svc.stderr()).not.toContain(wrong);
    expect(ws.svc.stderr()).not.toContain(USER_TOKEN);
    await screenshot(page, 'wrong-token');
  });

  it('signs in with the admin token and shows both nodes and the project mounts', async () => {
    await page.goto(`${base}/ui/`);
    await page.fill('#token', ADMIN_TOKEN);
    await Promise.all([page.waitForURL(`${base}/ui/`), page.click('#sign-in')]);
    const [cookie] = await context.cookies();
    expect(cookie).toMatchObject({ name: 'svc_ui_session', httpOnly: true, sameSite: 'Strict', path: '/' });
    expect(cookie.value).not.toContain(ADMIN_TOKEN);
    await page.waitForSelector('#conn.up', { timeout: 10_000 });
    for (const name of ['node-a', 'node-b']) {
      await expect(page.textContent(`tr[data-node-name="${name}"] .state`)).resolves.toBe('online');
    }
    const project = `div.project[data-project-id="${ws.project.project_id}"]`;
    await page.waitForSelector(`${project} tr[data-mount-path="/shared"]`);
    for (const path of ['/a', '/b', '/shared']) await expect(page.textContent(`${project} tr[data-mount-path="${path}"] .mount-state`)).resolves.toBe('online');
    await expect(page.textContent(`${project} tr[data-mount-path="/shared"]`)).resolves.toContain('node-a:shared');
    await expect(page.textContent(`${project} tr[data-mount-path="/shared"]`)).resolves.toContain('node-b:shared');
    // the topology picture: one box per node and per mount path, each naming its state
    expect(await page.locator('svg.topology g.t-node').count()).toBe(2);
    expect(await page.locator('svg.topology g.t-mount').count()).toBe(3);
    expect(await page.locator('svg.topology path.edge').count()).toBe(4);
    // no token anywhere in the page
    const html = await page.content();
    for (const t of [ADMIN_TOKEN, USER_TOKEN, ws.project.project_token]) expect(html).not.toContain(t);
    await expect(page.textContent('#card-nodes')).resolves.toContain('2 online, 0 degraded');
    await screenshot(page, 'signed-in');
  });

  it("shows a stopped node's mounts as degraded and the event within 3 s, without reloading", async () => {
    await page.evaluate(() => ((window as unknown as { __marker: number }).__marker = 42));
    const project = `div.project[data-project-id="${ws.project.project_id}"]`;
    const t0 = Date.now();
    const exited = ws.nodeA.stop();
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent === 'degraded', `${project} tr[data-mount-path="/a"] .mount-state`, {
      timeout: 3000,
      polling: 50,
    });
    await page.waitForFunction(
      () =>
        [...document.querySelectorAll('#events li[data-kind="availability"]')].some(
          (li) => li.textContent!.includes('/a') && li.textContent!.includes('degraded'),
        ),
      undefined,
      { timeout: Math.max(1, 3000 - (Date.now() - t0)), polling: 50 },
    );
    const elapsed = Date.now() - t0;
    process.stdout.write(`dashboard: node-a SIGTERM to "degraded" and its event on the page: ${elapsed} ms\n`);
    expect(elapsed).toBeLessThan(3000);
    expect((await exited).code).toBe(0);
    // the same page: not reloaded
    expect(await page.evaluate(() => (window as unknown as { __marker?: number }).__marker)).toBe(42);
    // /shared failed over to node-b; node-a's state word in the nodes table and the topology
    await page.waitForFunction((sel) => document.querySelector(sel)?.textContent?.includes('failover active'), `${project} tr[data-mount-path="/shared"]`, {
      timeout: 3000,
    });
    await expect(page.textContent(`${project} tr[data-mount-path="/shared"] td:nth-child(2)`)).resolves.toBe('node-b:shared');
    await page.waitForFunction(() => document.querySelector('tr[data-node-name="node-a"] .state')?.textContent === 'degraded', undefined, { timeout: 5000 });
    await expect(page.textContent(`svg.topology g.t-node[data-id="${ws.nodeIds.a}"]`)).resolves.toContain('degraded');
    await expect(page.textContent('#card-mounts')).resolves.toContain('1 degraded');
    await screenshot(page, 'node-a-stopped');
  });

  it('approves a pending join request with the button and shows the new node', async () => {
    nodeC = await startNodeDaemon(
      tmpDir('node-c-'),
      ws.svc.url,
      'node-c',
      ['--pair-mode', 'request', '--refresh-interval-ms', '1000', '--reconnect-backoff-ms', '200'],
      {
        SVC_LOG_LEVEL: 'warn',
      },
    );
    const button = page.locator('tr[data-node-name="node-c"] button.approve');
    await button.waitFor({ timeout: 10_000 });
    await screenshot(page, 'join-pending');
    await button.click();
    await page.waitForFunction(() => document.getElementById('join-result')?.textContent?.startsWith('Approved node-c'), undefined, { timeout: 5000 });
    // the daemon receives its credentials, takes its lease and shows up online
    await page.waitForFunction(() => document.querySelector('tr[data-node-name="node-c"] .state')?.textContent === 'online', undefined, { timeout: 10_000 });
    expect(await page.locator('tr[data-request-id]').count()).toBe(0);
    const html = await page.content();
    expect(html).not.toMatch(/node_secret|fs_auth_token/);
    await screenshot(page, 'node-c-approved');
  });

  it('shows the audit log with filters: the sign-ins, the setup and the approval', async () => {
    const filter = async (type: string) => {
      await page.fill('#audit-type', type);
      await page.click('#audit-filters button[type="submit"]');
      await page.waitForFunction(
        (t) => {
          const rows = [...document.querySelectorAll('#audit-table tbody tr')];
          return rows.length > 0 && rows.every((r) => r.getAttribute('data-type') === t);
        },
        type.includes('.') ? type : `control.${type}`,
        { timeout: 5000 },
      );
      return page.locator('#audit-table tbody tr').evaluateAll((rows) => rows.map((r) => [...r.querySelectorAll('td')].map((td) => td.textContent ?? '')));
    };
    expect(await page.locator('#audit-unavailable').count()).toBe(0);
    // two refused sign-ins (wrong token, user token) and one that succeeded, newest first
    const signIns = await filter('ui.sign_in');
    expect(signIns.map((r) => r[5])).toEqual(['ok', 'auth_failed', 'auth_failed']);
    expect(signIns.every((r) => r[2] === 'dashboard')).toBe(true);
    // the workspace setup: four mounts set by the test's admin session
    const mounts = await filter('project_mount_set');
    expect(mounts).toHaveLength(4);
    expect(mounts.every((r) => r[4].includes(`project_id=${ws.project.project_id}`) && r[5] === 'ok')).toBe(true);
    // the approval made with the button, by the dashboard's session
    const approvals = await filter('node_join_approve');
    expect(approvals).toHaveLength(1);
    expect(approvals[0]).toEqual([expect.any(String), 'admin', 'dashboard', 'control.node_join_approve', expect.stringMatching(/request_id=/), 'ok']);
    const html = await page.content();
    for (const t of [ADMIN_TOKEN, USER_TOKEN, ws.project.project_token]) expect(html).not.toContain(t);
    await screenshot(page, 'audit');
  });

  it('refuses a WebSocket opened from another origin', async () => {
    const addr = otherOrigin.address() as { port: number };
    const evil = await context.newPage();
    await evil.goto(`http://127.0.0.1:${addr.port}/`);
    expect(await browserWebSocket(evil, ws.svc.url)).toBe('refused');
    await waitFor(() => /upgrade refused: cross-origin WebSocket upgrade \(Origin http:\/\/127\.0\.0\.1:\d+/.test(ws.svc.stderr()), 3000);
    await evil.close();
    // The same with a plain client holding the browser's session cookie: only the dashboard's
    // own origin opens; a bearer token does not make a foreign Origin acceptable either.
    const [cookie] = await context.cookies();
    const jar = `${cookie.name}=${cookie.value}`;
    const host = new URL(ws.svc.url).host;
    expect(await upgradeStatus(ws.svc.url, { Cookie: jar, Origin: `http://${host}` })).toBe(101);
    expect(await upgradeStatus(ws.svc.url, { Cookie: jar, Origin: 'http://evil.example' })).toBe(403);
    expect(await upgradeStatus(ws.svc.url, { Cookie: jar, Origin: 'null' })).toBe(403);
    expect(await upgradeStatus(ws.svc.url, { Cookie: jar })).toBe(403);
    expect(await upgradeStatus(ws.svc.url, { Authorization: `Bearer ${ADMIN_TOKEN}`, Origin: 'http://evil.example' })).toBe(403);
    expect(await upgradeStatus(ws.svc.url, { Cookie: `${cookie.name}=${cookie.value.slice(0, -2)}xx`, Origin: `http://${host}` })).toBe(401);
    // clients without Origin keep using bearer tokens as before
    expect(await upgradeStatus(ws.svc.url, { Authorization: `Bearer ${ADMIN_TOKEN}` })).toBe(101);
  });

  it('never hands a role token to a cookie session (auth_status, auth_rotate: forbidden)', async () => {
    const [cookie] = await context.cookies();
    const host = new URL(ws.svc.url).host;
    const sock = new NodeWebSocket(ws.svc.url, { headers: { Cookie: `${cookie.name}=${cookie.value}`, Origin: `http://${host}` } });
    const replies: Array<Record<string, unknown>> = [];
    sock.on('message', (d) => replies.push(JSON.parse((d as Buffer).toString()) as Record<string, unknown>));
    await new Promise<void>((resolve, reject) => {
      sock.once('open', () => resolve());
      sock.once('error', reject);
    });
    const ask = async (frame: Record<string, unknown>) => {
      sock.send(JSON.stringify(frame));
      return waitFor(() => replies.find((r) => r.id === frame.id), 5000);
    };
    try {
      expect((await ask({ channel: 'control', type: 'control.version', id: 'v', payload: { protocol: 'unified-v2' } })).ok).toBe(true);
      expect((await ask({ channel: 'control', type: 'control.connect', id: 'c', payload: { agent_id: 'ui-probe' } })).ok).toBe(true);
      for (const [id, type, payload] of [
        ['s', 'control.auth_status', {}],
        ['r', 'control.auth_rotate', { role: 'user' }],
      ] as const) {
        const r = await ask({ channel: 'control', type, id, payload });
        expect(r.ok).toBe(false);
        expect((r.error as { code: string }).code).toBe('forbidden');
        expect(JSON.stringify(r)).not.toContain(ADMIN_TOKEN);
        expect(JSON.stringify(r)).not.toContain(USER_TOKEN);
      }
    } finally {
      sock.close();
    }
  });

  it('signs out: the session cookie no longer opens anything', async () => {
    const [cookie] = await context.cookies();
    const jar = `${cookie.name}=${cookie.value}`;
    const host = new URL(ws.svc.url).host;
    await Promise.all([page.waitForURL(`${base}/ui/`), page.click('#sign-out')]);
    await page.waitForSelector('#token');
    expect(await context.cookies()).toEqual([]);
    expect(await upgradeStatus(ws.svc.url, { Cookie: jar, Origin: `http://${host}` })).toBe(401);
    const res = await fetch(`${base}/ui/app.js`, { headers: { Cookie: jar } });
    expect(res.status).toBe(401);
  });

  it('rate limits sign-in attempts', async () => {
    const statuses: number[] = [];
    for (let i = 0; i < 14; i++) {
      const res = await fetch(`${base}/ui/sign-in`, { method: 'POST', body: new URLSearchParams({ token: `guess-${i}-0123456789` }), redirect: 'manual' });
      statuses.push(res.status);
      if (res.status === 429) expect(Number(res.headers.get('retry-after'))).toBeGreaterThanOrEqual(1);
    }
    expect(statuses.slice(0, 3)).not.toContain(429);
    expect(statuses.slice(-3)).toEqual([429, 429, 429]);
    // even the right token waits now
    const right = await fetch(`${base}/ui/sign-in`, { method: 'POST', body: new URLSearchParams({ token: ADMIN_TOKEN }), redirect: 'manual' });
    expect(right.status).toBe(429);
    expect(ws.svc.stderr()).toMatch(/dashboard sign-in refused: rate limited/);
    expect(ws.svc.stderr()).not.toMatch(/guess-\d+-0123456789/);
    expect(ws.svc.stderr()).not.toContain(ADMIN_TOKEN);
    void nodeC;
  });
});

describeWithOpenssl('web dashboard over TLS', () => {
  afterAll(async () => {
    await killAll();
    cleanupTmp();
  });

  /** One HTTPS request verified against `ca`: status, headers and body. */
  const fetchTls = (url: string, ca: Buffer, init: { method?: string; body?: string; headers?: Record<string, string> } = {}) =>
    new Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }>((resolve, reject) => {
      const req = httpsRequest(url, { method: init.method ?? 'GET', ca, headers: init.headers }, (res) => {
        let body = '';
        res.setEncoding('utf8').on('data', (d: string) => (body += d));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
      });
      req.once('error', reject);
      req.end(init.body);
    });

  it('serves /ui/ on the wss:// port with a Secure session cookie that opens wss:// from its own origin only', async () => {
    const ca = makeCa('svc dashboard test CA');
    const cert = ca.issue('svc');
    const pem = readFileSync(ca.cert);
    const svc = await startSvc({ args: ['--tls-cert', cert.cert, '--tls-key', cert.key], env: { SVC_LOG_LEVEL: 'warn' } });
    expect(svc.url).toMatch(/^wss:\/\/127\.0\.0\.1:\d+\/$/);
    const base = svc.url.replace(/^wss/, 'https').replace(/\/$/, '');
    const page = await fetchTls(`${base}/ui/`, pem);
    expect(page.status).toBe(200);
    expect(page.body).toContain('id="token"');
    // the port speaks TLS only
    await expect(fetch(`${base.replace('https', 'http')}/ui/`)).rejects.toThrow();
    const signIn = await fetchTls(`${base}/ui/sign-in`, pem, {
      method: 'POST',
      body: new URLSearchParams({ token: ADMIN_TOKEN }).toString(),
      headers: { 'Content-Type': 'application/x-www-form-urlencoded', Origin: base },
    });
    expect(signIn.status).toBe(303);
    const setCookie = String(signIn.headers['set-cookie']);
    expect(setCookie).toMatch(/^svc_ui_session=[^;]+; Path=\/; Max-Age=\d+; HttpOnly; SameSite=Strict; Secure$/);
    const jar = setCookie.split(';')[0];
    expect((await fetchTls(`${base}/ui/app.js`, pem, { headers: { Cookie: jar } })).status).toBe(200);
    expect(await upgradeStatus(svc.url, { Cookie: jar, Origin: base }, pem)).toBe(101);
    expect(await upgradeStatus(svc.url, { Cookie: jar, Origin: 'https://evil.example' }, pem)).toBe(403);
    expect(await upgradeStatus(svc.url, { Cookie: jar }, pem)).toBe(403);
  });
});
