// ESLint (flat config): the recommended rules of ESLint and typescript-eslint, with type
// information (recommendedTypeChecked: floating promises, unsafe `any`, ...). Each file is
// checked against its own tsconfig: ui/src against ui/tsconfig.json (browser, DOM library),
// everything else against tsconfig.json. `npm run lint` runs it with --max-warnings 0.
import comments from '@eslint-community/eslint-plugin-eslint-comments/configs';
import js from '@eslint/js';
import { defineConfig } from 'eslint/config';
import globals from 'globals';
import tseslint from 'typescript-eslint';

export default defineConfig(
  { ignores: ['dist/', 'coverage/', 'node_modules/'] },
  js.configs.recommended,
  tseslint.configs.recommendedTypeChecked,
  comments.recommended,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
      globals: globals.node,
    },
    linterOptions: { reportUnusedDisableDirectives: 'error' },
    rules: {
      // An eslint-disable comment says why, on its own line: `// eslint-disable-next-line rule -- reason`.
      '@eslint-community/eslint-comments/require-description': ['error', { ignore: ['eslint-enable'] }],
      // A name that starts with `_` is unused on purpose: a parameter that a signature requires,
      // or a property taken out of an object by destructuring before the rest is used.
      '@typescript-eslint/no-unused-vars': [
        'error',
        { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrorsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_', ignoreRestSiblings: true },
      ],
      // A value caught (unknown) may be passed on as it was, as only-throw-error allows by default.
      '@typescript-eslint/prefer-promise-reject-errors': ['error', { allowThrowingUnknown: true }],
      // Off: an `async` method without `await` is how this code implements a Promise-returning
      // interface (FS backends, FUSE operations, sources, their test doubles): `async` makes
      // its throws rejections, which the callers expect. Taking `async` away would change that.
      '@typescript-eslint/require-await': 'off',
    },
  },
  {
    // The e2e tests talk to real processes over JSON (WebSocket replies, CLI output, YAML
    // manifests) and check what comes back with expect(); they read those replies untyped on
    // purpose, to see exactly what was sent. The `any` comes in at a few places that say so
    // (no-explicit-any stays on); checking every use of it would add casts, not safety.
    // These rules stay on everywhere else, the unit tests beside the code included.
    files: ['test/**/*.e2e-spec.ts'],
    rules: {
      '@typescript-eslint/no-unsafe-argument': 'off',
      '@typescript-eslint/no-unsafe-assignment': 'off',
      '@typescript-eslint/no-unsafe-call': 'off',
      '@typescript-eslint/no-unsafe-member-access': 'off',
      '@typescript-eslint/no-unsafe-return': 'off',
    },
  },
  {
    // the dashboard's scripts run in the browser
    files: ['ui/src/**/*.ts'],
    languageOptions: { globals: globals.browser },
  },
  {
    // plain JavaScript (this file, jest.config.js, scripts/*.cjs): no TypeScript program to check it against
    files: ['**/*.js', '**/*.cjs', '**/*.mjs'],
    extends: [tseslint.configs.disableTypeChecked],
  },
  {
    // CommonJS files load their modules with require()
    files: ['**/*.js', '**/*.cjs'],
    languageOptions: { sourceType: 'commonjs' },
    rules: { '@typescript-eslint/no-require-imports': 'off' },
  },
);
