/** The FS deadlines of svc's runtime namespace from the environment. */
import { ConfigError, DEFAULT_FS_DEADLINES, loadServerConfig } from './config';

describe('loadServerConfig: FS deadlines', () => {
  it('defaults, and each SVC_FS_* variable sets its deadline (0 turns the keepalive pings off)', () => {
    expect(loadServerConfig([], {}).fsDeadlines).toEqual(DEFAULT_FS_DEADLINES);
    const env = {
      SVC_FS_CONNECT_TIMEOUT_MS: '1500',
      SVC_FS_REQUEST_TIMEOUT_MS: '20000',
      SVC_FS_KEEPALIVE_MS: '0',
      SVC_FS_KEEPALIVE_TIMEOUT_MS: '900',
      SVC_FS_OP_DEADLINE_MS: '3000',
    };
    expect(loadServerConfig([], env).fsDeadlines).toEqual({
      connectTimeoutMs: 1500,
      requestTimeoutMs: 20000,
      keepaliveMs: 0,
      keepaliveTimeoutMs: 900,
      opDeadlineMs: 3000,
    });
  });

  it('refuses malformed, zero, huge and contradictory values with a ConfigError naming the variable', () => {
    const bad = (env: NodeJS.ProcessEnv) => () => loadServerConfig([], env);
    expect(bad({ SVC_FS_OP_DEADLINE_MS: 'soon' })).toThrow(new ConfigError('SVC_FS_OP_DEADLINE_MS must be an integer >= 1 (got "soon")'));
    expect(bad({ SVC_FS_CONNECT_TIMEOUT_MS: '0' })).toThrow(ConfigError);
    expect(bad({ SVC_FS_REQUEST_TIMEOUT_MS: '3600001' })).toThrow(new ConfigError('SVC_FS_REQUEST_TIMEOUT_MS must be at most 3600000 (one hour), got 3600001'));
    expect(bad({ SVC_FS_KEEPALIVE_MS: '3000', SVC_FS_KEEPALIVE_TIMEOUT_MS: '2000' })).toThrow(
      new ConfigError('SVC_FS_KEEPALIVE_TIMEOUT_MS (2000) must be larger than SVC_FS_KEEPALIVE_MS (3000)'),
    );
  });
});
