import { Injectable } from '@nestjs/common';

/** Wall clock, ms since the epoch; a provider so tests of lease rules can substitute time. */
@Injectable()
export class Clock {
  now(): number {
    return Date.now();
  }
}
