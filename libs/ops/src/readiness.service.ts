/**
 * Readiness of a server for `/readyz` (Terminus): ready only while every condition holds
 * (state loaded, WebSocket listener up) and the server is not shutting down.
 */
import { Injectable } from '@nestjs/common';

@Injectable()
export class ReadinessService {
  private readonly conditions = new Map<string, boolean>();
  private shuttingDown = false;

  /** Declares a condition (initially unmet) that readiness waits for, e.g. `state_loaded`. */
  require(name: string): void {
    if (!this.conditions.has(name)) this.conditions.set(name, false);
  }

  /** Marks a condition met or unmet. */
  set(name: string, met: boolean): void {
    this.conditions.set(name, met);
  }

  /** Called on SIGTERM/SIGINT: readiness turns false for good. */
  beginShutdown(): void {
    this.shuttingDown = true;
  }

  get isShuttingDown(): boolean {
    return this.shuttingDown;
  }

  /** Ready when not shutting down and every declared condition is met. */
  get isReady(): boolean {
    if (this.shuttingDown) return false;
    for (const met of this.conditions.values()) if (!met) return false;
    return true;
  }

  /** The unmet conditions, for the `/readyz` body. */
  pending(): string[] {
    const out = [...this.conditions].filter(([, met]) => !met).map(([name]) => name);
    if (this.shuttingDown) out.push('shutting_down');
    return out;
  }
}
