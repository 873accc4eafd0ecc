/** Starting the built programs as real processes; one home in `bench/support/processes.ts` (built with the benches). */
export * from '../../bench/support/processes';
