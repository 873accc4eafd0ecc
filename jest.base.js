/**
 * What every Jest configuration of this repository shares: ts-jest and the `@svc/*` paths
 * (jest.config.js: the suite; jest.conformance.config.js: the conformance step).
 */
module.exports = {
  testEnvironment: 'node',
  transform: { '^.+\\.ts$': ['ts-jest', { tsconfig: 'tsconfig.spec.json', diagnostics: false }] },
  moduleNameMapper: {
    '^@svc/protocol/wire$': '<rootDir>/libs/protocol/src/wire',
    '^@svc/fs/router$': '<rootDir>/libs/fs/src/router',
    '^@svc/fs/fuse$': '<rootDir>/libs/fs/src/fuse/fuse-fs',
    '^@svc/(.*)$': '<rootDir>/libs/$1/src',
  },
};
