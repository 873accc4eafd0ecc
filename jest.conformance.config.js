/**
 * Jest: the conformance step of `npm test`, run after the suite of jest.config.js
 * (`test/conformance/*.conformance-spec.ts`: pjdfstest through real FUSE mounts; minutes, so
 * one file at a time). Alone: `npm run test:conformance`.
 */
module.exports = {
  ...require('./jest.base.js'),
  roots: ['<rootDir>/test/conformance'],
  testMatch: ['**/*.conformance-spec.ts'],
  testTimeout: 60000,
  maxWorkers: 1,
  verbose: true,
};
