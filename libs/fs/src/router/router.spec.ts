/**
 * Unit tests of the router's pure parts: path normalisation, longest-prefix resolution and the
 * synthetic tree, the lookup cache and its invalidation, candidate order (the selection
 * rule), and `--endpoint` parsing.
 */
import { Errno, FsError, WorkspaceStatus } from '@svc/protocol';
import { mountView as mv } from '../../../../test/fixtures/workspace-status';
import { LookupCache } from './lookup-cache';
import { MountTable } from './mount-table';
import { normalizePath } from './paths';
import { parseEndpointSpec, topologyFromEndpoints, topologyFromStatus } from './topology';

function errnoOf(fn: () => unknown): number | undefined {
  try {
    fn();
  } catch (e) {
    return e instanceof FsError ? e.errno : -1;
  }
  return undefined;
}

describe('normalizePath', () => {
  it('removes repeated and trailing slashes and "." segments', () => {
    expect(normalizePath('//docs/./a//b/')).toBe('/docs/a/b');
    expect(normalizePath('/')).toBe('/');
    expect(normalizePath('///')).toBe('/');
  });
  it('refuses relative paths, ".." and NUL with EINVAL', () => {
    expect(errnoOf(() => normalizePath('docs'))).toBe(Errno.EINVAL);
    expect(errnoOf(() => normalizePath('/docs/../etc'))).toBe(Errno.EINVAL);
    expect(errnoOf(() => normalizePath('/a\0b'))).toBe(Errno.EINVAL);
  });
});

describe('MountTable', () => {
  const t = new MountTable(['/docs', '/team/shared', '/team/shared/deep', '/x/y/z']);

  it('resolves by the longest mount_path prefix', () => {
    expect(t.resolve('/docs')).toEqual({ kind: 'mount', path: '/docs', mountPath: '/docs', rel: '' });
    expect(t.resolve('/docs/a/b')).toEqual({ kind: 'mount', path: '/docs/a/b', mountPath: '/docs', rel: 'a/b' });
    expect(t.resolve('/team/shared/f')).toMatchObject({ mountPath: '/team/shared', rel: 'f' });
    expect(t.resolve('/team/shared/deep/f')).toMatchObject({ mountPath: '/team/shared/deep', rel: 'f' });
    expect(t.resolve('/team/shared/deeper')).toMatchObject({ mountPath: '/team/shared', rel: 'deeper' });
    expect(t.resolve('/docsx')).toEqual({ kind: 'none', path: '/docsx' });
  });

  it('lists first segments at / and intermediate synthetic directories', () => {
    expect(t.resolve('/')).toEqual({ kind: 'synthetic', path: '/', children: ['docs', 'team', 'x'] });
    expect(t.resolve('/team')).toEqual({ kind: 'synthetic', path: '/team', children: ['shared'] });
    expect(t.resolve('/x/y')).toEqual({ kind: 'synthetic', path: '/x/y', children: ['z'] });
    expect(t.resolve('/team/other')).toEqual({ kind: 'none', path: '/team/other' });
  });

  it('overlays nested mount paths on the listing of the enclosing mount', () => {
    expect(t.overlaysOf('/team/shared')).toEqual(['deep']);
    expect(t.overlaysOf('/docs')).toEqual([]);
    expect(t.overlaysOf('/')).toEqual([]);
  });

  it('an empty table has an empty synthetic root; a "/" mount serves everything', () => {
    expect(new MountTable([]).resolve('/')).toEqual({ kind: 'synthetic', path: '/', children: [] });
    const root = new MountTable(['/', '/b']);
    expect(root.resolve('/')).toEqual({ kind: 'mount', path: '/', mountPath: '/', rel: '' });
    expect(root.resolve('/a/c')).toMatchObject({ mountPath: '/', rel: 'a/c' });
    expect(root.resolve('/b/c')).toMatchObject({ mountPath: '/b', rel: 'c' });
    expect(root.overlaysOf('/')).toEqual(['b']);
  });
});

describe('LookupCache', () => {
  it('maps paths to ids and back; a changed directory makes its children unverified, not forgotten', () => {
    const c = new LookupCache();
    c.set('', 1);
    c.set('a', 2);
    c.set('a/b', 3);
    c.set('a/b/c', 4);
    c.set('d', 5);
    expect(c.get('a/b')).toBe(3);
    expect(c.pathsOf(3)).toEqual(['a/b']);
    expect(c.usablePrefix(['a', 'b', 'c', 'e'])).toEqual({ depth: 3, id: 4 });
    expect(c.childrenChanged(2)).toEqual(['a']);
    // still mapped (pushes about node 4 still name a/b/c), but walks stop before a/b
    expect(c.pathsOf(4)).toEqual(['a/b/c']);
    expect(c.isVerified('a/b')).toBe(false);
    expect(c.isVerified('a')).toBe(true);
    expect(c.usablePrefix(['a', 'b', 'c'])).toEqual({ depth: 1, id: 2 });
    // looked up again with the same id: verified again, the subtree is kept
    c.set('a/b', 3);
    expect(c.usablePrefix(['a', 'b', 'c'])).toEqual({ depth: 3, id: 4 });
    // looked up with another id: the old subtree belonged to another node
    c.childrenChanged(2);
    c.set('a/b', 9);
    expect(c.get('a/b/c')).toBeUndefined();
    expect(c.pathsOf(3)).toEqual([]);
    c.set('a/x', 6);
    expect(c.dropTree('a')).toBe(3);
    expect(c.size).toBe(2);
    expect(c.nodeChanged(5)).toEqual(['d']);
    expect(c.usablePrefix(['d', 'e'])).toEqual({ depth: 0, id: undefined });
    expect(c.get('')).toBe(1);
  });

  it('re-pointing a path updates the reverse index; the oldest entries go first when full', () => {
    const c = new LookupCache(3);
    c.set('a', 1);
    c.set('a', 2);
    expect(c.pathsOf(1)).toEqual([]);
    expect(c.pathsOf(2)).toEqual(['a']);
    c.set('b', 3);
    c.set('c', 4);
    c.set('d', 5);
    expect(c.size).toBe(3);
    expect(c.get('a')).toBeUndefined();
    expect(c.get('d')).toBe(5);
  });
});

describe('topologyFromStatus', () => {
  it('puts the selected mount first, then the others by the selection rule', () => {
    const desired = [
      mv('/s', 'n1', 'missing', null),
      mv('/s', 'n2', 'degraded', 500),
      mv('/s', 'n3', 'online', 100),
      mv('/s', 'n4', 'online', 900, { auth_token: 'tok4' }),
      mv('/d', 'n1', 'online', 100),
    ];
    const status: WorkspaceStatus = {
      agent_id: 'default',
      project_id: 'p',
      workspace_root: '/projects/p/fs',
      mounts: [desired[3], desired[4]],
      desired_mounts: desired,
      actual_mounts: [desired[3], desired[4]],
      drift: { count: 0, items: [] },
      availability: { mounts_total: 2, online: 2, degraded: 0, missing: 0 },
      revision: 7,
    };
    const t = topologyFromStatus(status);
    expect(t.revision).toBe(7);
    expect([...t.mounts.keys()]).toEqual(['/d', '/s']);
    expect(t.mounts.get('/s')!.map((c) => c.node_id)).toEqual(['n4', 'n3', 'n2', 'n1']);
    expect(t.mounts.get('/s')![0]).toMatchObject({ selected: true, auth_token: 'tok4' });
    expect(t.mounts.get('/s')![1].selected).toBe(false);
    // the control plane's selection wins even when it is not what the rule would pick now
    const t2 = topologyFromStatus({ ...status, mounts: [desired[2]] });
    expect(t2.mounts.get('/s')!.map((c) => c.node_id)).toEqual(['n3', 'n4', 'n2', 'n1']);
  });
});

describe('parseEndpointSpec', () => {
  it('applies the defaults: export "work", mount /<name>', () => {
    expect(parseEndpointSpec('a=ws://127.0.0.1:1234/v2/fs')).toEqual({ name: 'a', url: 'ws://127.0.0.1:1234/v2/fs', export_name: 'work', mount_path: '/a' });
  });
  it('reads #export and @/mount', () => {
    expect(parseEndpointSpec('b=ws://h:1/v2/fs#docs@/team/docs/')).toEqual({ name: 'b', url: 'ws://h:1/v2/fs', export_name: 'docs', mount_path: '/team/docs' });
    expect(parseEndpointSpec('c=ws://h:1/v2/fs@/m')).toMatchObject({ export_name: 'work', mount_path: '/m' });
  });
  it('refuses malformed specs with EINVAL', () => {
    for (const bad of ['noequals', '=ws://h/v2/fs', 'a=http://h/v2/fs', 'a=not a url', 'a=ws://h/v2/fs#bad/export', 'a=ws://h/v2/fs@/x/../y']) {
      expect(errnoOf(() => parseEndpointSpec(bad))).toBe(Errno.EINVAL);
    }
  });
  it('a repeated mount path is a failover group in the order given', () => {
    const t = topologyFromEndpoints(
      [parseEndpointSpec('p=ws://h:1/v2/fs@/s'), parseEndpointSpec('q=ws://h:2/v2/fs@/s'), parseEndpointSpec('r=ws://h:3/v2/fs')],
      'T',
    );
    expect([...t.mounts.keys()]).toEqual(['/r', '/s']);
    expect(t.mounts.get('/s')!.map((c) => c.node_name)).toEqual(['p', 'q']);
    expect(t.mounts.get('/s')!.every((c) => c.auth_token === 'T')).toBe(true);
  });
});
