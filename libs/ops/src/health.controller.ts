/**
 * `/livez` and `/readyz` through Terminus.
 * `/livez` is 200 while the process serves HTTP; `/readyz` is 200 only when
 * {@link ReadinessService} says ready, else 503.
 */
import { Controller, Get } from '@nestjs/common';
import { HealthCheck, HealthCheckService, HealthIndicatorService } from '@nestjs/terminus';
import { ReadinessService } from './readiness.service';

@Controller()
export class HealthController {
  constructor(
    private readonly health: HealthCheckService,
    private readonly indicators: HealthIndicatorService,
    private readonly readiness: ReadinessService,
  ) {}

  @Get('livez')
  @HealthCheck()
  livez() {
    return this.health.check([() => this.indicators.check('process').up({ pid: process.pid, uptime_s: Math.round(process.uptime()) })]);
  }

  @Get('readyz')
  @HealthCheck()
  readyz() {
    return this.health.check([
      () => {
        const check = this.indicators.check('ready');
        return this.readiness.isReady ? check.up() : check.down({ waiting_for: this.readiness.pending() });
      },
    ]);
  }
}
