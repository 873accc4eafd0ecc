/**
 * Jest: unit tests (`*.spec.ts` beside the code) and e2e tests (`test/*.e2e-spec.ts`, real processes).
 *
 * Projects: `default` runs everything. The FS e2e files run twice more with the FS extensions
 * off (docs/protocol.md "FS extensions"), through the environment the spawned programs and the
 * in-process clients inherit: `fs-ext-off-client` (clients ask for none, nodes offer all) and
 * `fs-ext-off-node` (clients ask for all, nodes grant none). For a quick run of one file:
 * `npx jest test/fuse.e2e-spec.ts --selectProjects=default`. The conformance suites
 * (`test/conformance/*.conformance-spec.ts`) run after this suite, from jest.conformance.config.js.
 */
const base = {
  ...require('./jest.base.js'),
  roots: ['<rootDir>/libs', '<rootDir>/src', '<rootDir>/apps', '<rootDir>/test'],
  testMatch: ['**/*.spec.ts', '**/*.e2e-spec.ts'],
};

/** The FS e2e files (real nodes, mounts and routers), run again with the extensions off. */
const FS_E2E = ['fs-node', 'fs-mount', 'fuse', 'workspace-router', 'router-cache', 'fs-confinement', 'fs-hang'].map((n) => `<rootDir>/test/${n}.e2e-spec.ts`);

module.exports = {
  projects: [
    { ...base, displayName: 'default' },
    { ...base, displayName: 'fs-ext-off-client', roots: ['<rootDir>/test'], testMatch: FS_E2E, setupFiles: ['<rootDir>/test/helpers/fs-ext-off-client.ts'] },
    { ...base, displayName: 'fs-ext-off-node', roots: ['<rootDir>/test'], testMatch: FS_E2E, setupFiles: ['<rootDir>/test/helpers/fs-ext-off-node.ts'] },
  ],
  testTimeout: 60000,
  maxWorkers: 2,
  verbose: false,
};
