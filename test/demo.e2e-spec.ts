/**
 * e2e: the README's first command runs to the end (`npm run demo -- --ci`, here the built
 * script directly) and exits 0, leaving no process behind.
 */
import { join } from 'node:path';
import { ROOT, runCli } from './helpers/processes';

it('runs the demo to the end and exits 0', async () => {
  const r = await runCli(join(ROOT, 'dist/scripts/demo.js'), ['--ci'], { timeoutMs: 120_000 });
  if (r.code !== 0) throw new Error(`demo exited ${r.code}\n${r.stdout}\n${r.stderr}`);
  expect(r.stdout).toContain('==> done');
  expect(r.stdout).toMatch(/\/shared -> node-b \(online\)/);
  // secrets are not printed whole
  expect(r.stdout).not.toMatch(/"node_secret":"[A-Za-z0-9_-]{43}"/);
}, 120_000);
