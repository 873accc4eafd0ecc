/** A throwaway PostgreSQL for e2e tests; one home in `bench/support/postgres.ts` (built with the benches). */
export * from '../../bench/support/postgres';
