/** The seeded PRNG of the fuzz tests; one home in `bench/prng.ts` (built with the benches). */
export { prng } from '../../bench/prng';
