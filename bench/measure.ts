/** The figures every bench computes the same way: quantiles of samples and a process's resident memory. */
import { readFileSync } from 'node:fs';

/**
 * The q-quantile of `xs`: the value at rank floor(q * n) of the n samples sorted ascending (the
 * largest for q = 1); the input is not changed.
 * @param q from 0 to 1, e.g. 0.99 for the 99th percentile
 * @returns NaN for an empty array
 */
export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))];
}

/**
 * The median of `xs`: {@link quantile} 0.5 (for an even count, the upper of the two middle values).
 * @returns NaN for an empty array
 */
export function median(xs: readonly number[]): number {
  return quantile(xs, 0.5);
}

/**
 * The resident memory of process `pid`, MiB (VmRSS of /proc/PID/status).
 * @throws Error when the process is gone (or there is no /proc)
 */
export function rssMiB(pid: number): number {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return Number(/VmRSS:\s+(\d+)/.exec(status)![1]) / 1024;
}
