/**
 * Metrics for `/metrics` (Prometheus text, @willsoto/nestjs-prometheus) and `/metrics.json`
 * / `control.metrics` (the same figures as JSON).
 */
import { Controller, Get, Injectable } from '@nestjs/common';
import { Counter, Gauge, Histogram, register } from 'prom-client';
import type { RequestObserver } from '@svc/transport';

/** The JSON form of the metrics: `{ts_ms, metrics: [{name, help, type, values:[{labels, value}]}]}`. */
export interface MetricsJson {
  ts_ms: number;
  metrics: unknown[];
}

/** Reads the process registry as JSON. */
@Injectable()
export class MetricsJsonService {
  /** The current figures of every registered metric (prom-client `getMetricsAsJSON`). */
  async json(): Promise<MetricsJson> {
    return { ts_ms: Date.now(), metrics: await register.getMetricsAsJSON() };
  }
}

@Controller()
export class MetricsJsonController {
  constructor(private readonly metrics: MetricsJsonService) {}

  @Get('metrics.json')
  json(): Promise<MetricsJson> {
    return this.metrics.json();
  }
}

/** Returns the metric registered under `name`, or creates it (so tests and restarts in one process never register twice). */
export function getOrCreate<T>(name: string, create: () => T): T {
  return (register.getSingleMetric(name) as T | undefined) ?? create();
}

/**
 * A gauge computed when scraped: at each scrape `collect` sets its value (or, with `labelNames`,
 * its labelled values) from the live state. Registered once per process ({@link getOrCreate}).
 * @param labelNames label names of the values (none by default)
 */
export function scrapedGauge(name: string, help: string, collect: (g: Gauge<string>) => void, labelNames: string[] = []): Gauge<string> {
  return getOrCreate(
    name,
    () =>
      new Gauge({
        name,
        help,
        labelNames,
        collect() {
          collect(this);
        },
      }),
  );
}

/**
 * Request metrics of an envelope endpoint: a counter by type and result and a duration
 * histogram by type. Names are given by the program (`svc_requests_total`, `svc_fs_ops_total`).
 */
export class RequestMetrics implements RequestObserver {
  private readonly total: Counter<string>;
  private readonly duration: Histogram<string>;
  /** Labelled children, cached: label hashing per observation is the costly part. */
  private readonly totals = new Map<string, Counter.Internal>();
  private readonly durations = new Map<string, Histogram.Internal<string>>();

  /**
   * @param prefix metric name prefix, e.g. `svc_requests` or `svc_fs_ops`
   * @param typeLabel label name for the request type (`type`, or `op` on FS nodes)
   * @param stripTypePrefix removed from type names for the label, e.g. `acheron.t_fs_`
   */
  constructor(
    prefix: string,
    private readonly typeLabel = 'type',
    private readonly stripTypePrefix = '',
  ) {
    this.total = getOrCreate(
      `${prefix}_total`,
      () => new Counter({ name: `${prefix}_total`, help: 'Requests answered, by type and result (ok or the error code)', labelNames: [typeLabel, 'result'] }),
    );
    this.duration = getOrCreate(
      `${prefix === 'svc_requests' ? 'svc_request' : prefix}_duration_seconds`,
      () =>
        new Histogram({
          name: `${prefix === 'svc_requests' ? 'svc_request' : prefix}_duration_seconds`,
          help: 'Time from frame receipt to reply, seconds',
          labelNames: [typeLabel],
          buckets: [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1, 5],
        }),
    );
  }

  observe(type: string, result: string, seconds: number): void {
    const key = `${type}\0${result}`;
    let total = this.totals.get(key);
    let duration = this.durations.get(type);
    if (!total || !duration) {
      const t = this.stripTypePrefix && type.startsWith(this.stripTypePrefix) ? type.slice(this.stripTypePrefix.length) : type;
      total = this.total.labels({ [this.typeLabel]: t, result });
      duration = this.duration.labels({ [this.typeLabel]: t });
      this.totals.set(key, total);
      this.durations.set(type, duration);
    }
    total.inc();
    duration.observe(seconds);
  }
}
