/**
 * Unit tests of the audit rules (docs/protocol.md "Audit log" `control.audit_list`): which handlers are
 * audited, what a target holds, and the rate limit of entries that ride on no mutation.
 */
import 'reflect-metadata';
import { MESSAGE_METADATA } from '@nestjs/websockets/constants';
import { AUDITED_OPERATIONS, PROTECTED_OPERATIONS } from '@svc/protocol';
import { CatalogGateway } from '../catalog/catalog.gateway';
import { ControlGateway } from '../control/control.gateway';
import { ProjectsGateway } from '../projects/projects.gateway';
import { AUDITED } from './audit.gates';
import { AuditGateway } from './audit.gateway';
import { targetOf } from './audit.service';
import { RefusalLimiter, TokenBucket } from './rate-limit';

it('AUDITED_OPERATIONS matches the @Audited() handlers, and every protected operation is audited', () => {
  const marked: string[] = [];
  for (const gw of [ControlGateway, ProjectsGateway, CatalogGateway, AuditGateway]) {
    for (const name of Object.getOwnPropertyNames(gw.prototype)) {
      const fn: unknown = Object.getOwnPropertyDescriptor(gw.prototype, name)?.value;
      if (typeof fn !== 'function') continue;
      const type: unknown = Reflect.getMetadata(MESSAGE_METADATA, fn);
      if (typeof type === 'string' && Reflect.getMetadata(AUDITED, fn)) marked.push(type);
    }
  }
  expect(marked.sort()).toEqual([...AUDITED_OPERATIONS].sort());
  expect(AUDITED_OPERATIONS).toEqual(expect.arrayContaining([...PROTECTED_OPERATIONS]));
  expect(AUDITED_OPERATIONS).not.toContain('control.node_lease_refresh');
});

describe('targetOf', () => {
  it('takes ids from the reply first, then the payload, and the normalised mount path', () => {
    expect(
      targetOf({ project_id: 'proj-1', mount_path: '//a//b/', node_id: 'node-1', export_name: 'x' }, { project_id: 'proj-1', node_id: 'node-2' }, null),
    ).toEqual({
      project_id: 'proj-1',
      node_id: 'node-2',
      mount_path: '/a/b',
    });
    expect(targetOf({}, { request_id: 'join-1', request_secret: 's' }, null)).toEqual({ request_id: 'join-1' });
  });

  it('never takes a secret field, and leaves out what is not an id or a mount path', () => {
    const t = targetOf(
      { project_token: 'tok', node_secret: 'sec', operator_token: 'op', invite_token: 'inv', project_id: 'a b', node_id: 5, mount_path: 'rel' },
      { node_secret: 'sec', project_token: 'tok', fs_auth_token: 'fs' },
      null,
    );
    expect(t).toEqual({});
  });

  it('for a failed request keeps a payload id only when the store knows it', () => {
    const known = (_f: string, id: string) => id === 'proj-known';
    expect(targetOf({ project_id: 'proj-known' }, null, known)).toEqual({ project_id: 'proj-known' });
    // e.g. a token pasted into project_id by mistake
    expect(targetOf({ project_id: 'Xk3_aLongBase64UrlTokenValue0123456789abcdef' }, null, known)).toEqual({});
  });
});

describe('RefusalLimiter', () => {
  it('a bucket refills at its rate up to its burst', () => {
    const b = new TokenBucket(2, 3, 0);
    expect([b.take(0), b.take(0), b.take(0), b.take(0)]).toEqual([true, true, true, false]);
    expect(b.take(400)).toBe(false);
    expect(b.take(500)).toBe(true);
    expect(b.isFull(10_000)).toBe(true);
  });

  it('limits each source and the whole process', () => {
    const l = new RefusalLimiter({ globalPerSec: 10, globalBurst: 30, sourcePerSec: 1, sourceBurst: 5, maxSources: 100 }, 0);
    const allowed = (source: string, n: number) => Array.from({ length: n }, () => l.allow(source, 0)).filter(Boolean).length;
    expect(allowed('flood', 1000)).toBe(5);
    // others still get theirs, until the process-wide bucket is empty
    expect(allowed('a', 10) + allowed('b', 10) + allowed('c', 10) + allowed('d', 10) + allowed('e', 10) + allowed('f', 10)).toBe(25);
    expect(allowed('g', 10)).toBe(0);
    // a second later: 10 more over the process
    expect(['h', 'i', 'j'].map((s) => Array.from({ length: 5 }, () => l.allow(s, 1000)).filter(Boolean).length).reduce((a, b) => a + b)).toBe(10);
  });

  it('forgets quiet sources rather than growing without bound', () => {
    const l = new RefusalLimiter({ globalPerSec: 1e9, globalBurst: 1e9, sourcePerSec: 1, sourceBurst: 1, maxSources: 10 }, 0);
    for (let i = 0; i < 1000; i++) expect(l.allow(`s${i}`, i * 2000)).toBe(true);
    expect(l.trackedSources).toBeLessThanOrEqual(10);
  });
});
