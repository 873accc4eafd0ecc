/**
 * A plug-in for the plain HTTP side of an envelope endpoint's listener (the same port, and the
 * same TLS, as its WebSocket): `svc` serves its web dashboard under `/ui/` through one
 * (src/dashboard). The adapter asks it first about every plain request and every upgrade;
 * what it does not take goes the adapter's usual way.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Role } from '@svc/protocol';

/** What an {@link HttpExtension} decides about a WebSocket upgrade. */
export type UpgradeVerdict =
  /** Authenticated by the extension (e.g. a dashboard session cookie): no bearer token needed. */
  | { role: Role }
  /** Refused before authentication; `log` says why, for the server log (never a secret). */
  | { refuse: { status: number; reason: string; log: string } };

/** Handles plain HTTP requests and vets upgrades of an endpoint's listener. */
export interface HttpExtension {
  /**
   * Offered every plain (non-upgrade) request first.
   * @returns true when the extension took the request (and will answer it); false leaves it
   *   to the adapter (HTTP 426 "connect with a WebSocket client")
   */
  handleRequest(req: IncomingMessage, res: ServerResponse): boolean;
  /**
   * Asked about every upgrade on the endpoint's path before the profile's bearer-token check.
   * @returns a verdict, or null to let the profile authenticate the upgrade as usual
   */
  checkUpgrade(req: IncomingMessage): UpgradeVerdict | null;
}
