/** Jest: unit tests (`*.spec.ts` beside the code) and e2e tests (`test/*.e2e-spec.ts`, real processes). */
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/libs', '<rootDir>/src', '<rootDir>/apps', '<rootDir>/test'],
  testMatch: ['**/*.spec.ts', '**/*.e2e-spec.ts'],
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.spec.json', diagnostics: false }] },
  moduleNameMapper: {
    '^@svc/protocol/wire$': '<rootDir>/libs/protocol/src/wire',
    '^@svc/fs/router$': '<rootDir>/libs/fs/src/router',
    '^@svc/fs/fuse$': '<rootDir>/libs/fs/src/fuse/fuse-fs',
    '^@svc/(.*)$': '<rootDir>/libs/$1/src',
  },
  testTimeout: 60000,
  maxWorkers: 2,
  verbose: false,
};
