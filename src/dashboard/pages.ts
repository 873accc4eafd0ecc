/**
 * The dashboard's fixed documents: the sign-in page, the application shell
 * and the style sheet. They hold no data and no token: everything the dashboard shows comes
 * over the signed-in WebSocket session (ui/src), and nothing here is built from request input
 * except the fixed messages of {@link signInPage}.
 */

/** Messages the sign-in page can show (fixed texts: nothing from the request is echoed). */
export type SignInNotice = 'none' | 'wrong_token' | 'rate_limited' | 'signed_out' | 'not_ready' | 'bad_request';

const NOTICES: Record<SignInNotice, string> = {
  none: '',
  wrong_token: 'Sign-in refused: that is not the admin token.',
  rate_limited: 'Too many sign-in attempts from this address. Wait a minute and try again.',
  signed_out: 'Signed out.',
  not_ready: 'The server is still loading its state. Try again in a moment.',
  bad_request: 'The sign-in request could not be read. Send the form again.',
};

const head = (title: string, script: boolean) => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="referrer" content="same-origin">
<title>${title}</title>
<link rel="stylesheet" href="/ui/style.css">${script ? '\n<script type="module" src="/ui/app.js"></script>' : ''}
</head>`;

/** The sign-in page: one password field posted to `/ui/sign-in`, and a fixed notice. */
export function signInPage(notice: SignInNotice = 'none'): string {
  const text = NOTICES[notice];
  return `${head('svc: sign in', false)}
<body class="signin">
<main>
<h1>svc dashboard</h1>
<p>Sign in with the admin token (<code>SVC_ADMIN_TOKEN</code>, or <code>admin_token</code> in <code>&lt;state-dir&gt;/auth_tokens.json</code>).</p>
${text ? `<p id="notice" class="notice" role="alert">${text}</p>` : ''}
<form method="post" action="/ui/sign-in" autocomplete="off">
<label for="token">Admin token</label>
<input id="token" name="token" type="password" autocomplete="current-password" required maxlength="1024">
<button id="sign-in" type="submit">Sign in</button>
</form>
</main>
</body>
</html>
`;
}

/** The application shell: empty sections that ui/src/app.ts fills from the WebSocket session. */
export function appShell(): string {
  return `${head('svc dashboard', true)}
<body>
<header>
<h1>svc dashboard</h1>
<span id="conn" class="conn" role="status">connecting</span>
<span id="updated" class="muted"></span>
<form method="post" action="/ui/sign-out"><button id="sign-out" type="submit">Sign out</button></form>
</header>
<main>
<section id="overview" aria-label="Fleet overview"></section>
<section aria-labelledby="h-topology"><h2 id="h-topology">Topology</h2><div id="topology"></div></section>
<section aria-labelledby="h-nodes"><h2 id="h-nodes">Nodes</h2><div id="nodes"></div></section>
<section aria-labelledby="h-projects"><h2 id="h-projects">Projects</h2><div id="projects"></div></section>
<section aria-labelledby="h-joins"><h2 id="h-joins">Pending join requests</h2>
<div id="joins"></div>
<div id="optoken" class="optoken" hidden>
<label for="optoken-input">Operator token (this server gates approvals with <code>SVC_CONTROL_OPERATOR_TOKEN</code>; kept in this tab's memory only)</label>
<input id="optoken-input" type="password" autocomplete="off">
</div>
<p id="join-result" class="muted" role="status"></p>
</section>
<section aria-labelledby="h-events"><h2 id="h-events">Live events</h2><ol id="events" class="events"></ol></section>
<section aria-labelledby="h-audit"><h2 id="h-audit">Audit log</h2>
<form id="audit-filters" class="filters">
<label>Since <select id="audit-since"><option value="900000">15 min</option><option value="3600000" selected>1 h</option><option value="86400000">24 h</option><option value="604800000">7 days</option><option value="">all</option></select></label>
<label>Agent <input id="audit-agent" size="12"></label>
<label>Type <input id="audit-type" size="24" placeholder="project_up, ui.sign_in"></label>
<button type="submit">Filter</button>
</form>
<div id="audit"></div>
<button id="audit-more" type="button" hidden>Older entries</button>
</section>
</main>
</body>
</html>
`;
}

/** The style sheet: state colours always come with the state word (never colour alone). */
export const STYLE_CSS = `:root { color-scheme: light dark; --online: #1a7f37; --degraded: #bf8700; --missing: #cf222e; --fg: #1f2328; --bg: #ffffff; --muted: #656d76; --line: #d0d7de; --card: #f6f8fa; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6edf3; --bg: #0d1117; --muted: #8d96a0; --line: #30363d; --card: #161b22; --online: #3fb950; --degraded: #d29922; --missing: #f85149; } }
* { box-sizing: border-box; }
body { margin: 0; font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg); background: var(--bg); }
header { display: flex; gap: 1em; align-items: center; padding: .6em 1.2em; border-bottom: 1px solid var(--line); position: sticky; top: 0; background: var(--bg); z-index: 1; }
header h1 { font-size: 1.1em; margin: 0; }
header form { margin-left: auto; }
main { padding: 0 1.2em 2em; max-width: 1400px; }
h2 { font-size: 1.05em; margin: 1.4em 0 .5em; }
h3 { font-size: 1em; margin: 1em 0 .3em; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .3em .6em; border-bottom: 1px solid var(--line); vertical-align: top; }
th { font-weight: 600; color: var(--muted); }
code, .mono { font-family: ui-monospace, SFMono-Regular, Menlo, monospace; font-size: .92em; }
.muted { color: var(--muted); }
.conn { font-weight: 600; }
.conn.up { color: var(--online); } .conn.down { color: var(--missing); }
.cards { display: flex; flex-wrap: wrap; gap: .8em; margin-top: 1em; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 6px; padding: .6em 1em; min-width: 11em; }
.card .n { font-size: 1.6em; font-weight: 600; }
.state { display: inline-block; padding: 0 .5em; border-radius: 1em; font-weight: 600; font-size: .9em; color: #fff; }
.state-online { background: var(--online); } .state-degraded { background: var(--degraded); } .state-missing { background: var(--missing); }
.drift { color: var(--degraded); } .drift.critical { color: var(--missing); }
.events { list-style: none; padding: 0; margin: 0; max-height: 22em; overflow: auto; border: 1px solid var(--line); border-radius: 6px; }
.events li { padding: .25em .6em; border-bottom: 1px solid var(--line); }
.events li.new { animation: flash 1.5s ease-out; }
@keyframes flash { from { background: var(--card); } }
.filters { display: flex; flex-wrap: wrap; gap: .8em; align-items: end; margin-bottom: .6em; }
.optoken { margin: .6em 0; } .optoken input { width: 28em; max-width: 100%; }
button { font: inherit; padding: .2em .8em; cursor: pointer; }
svg.topology { width: 100%; height: auto; border: 1px solid var(--line); border-radius: 6px; background: var(--card); }
svg.topology text { fill: var(--fg); font: 12px system-ui, sans-serif; }
svg.topology .edge { stroke-width: 2; fill: none; }
svg.topology .edge.standby { stroke-dasharray: 5 4; }
svg.topology .box { stroke: var(--line); fill: var(--bg); }
svg.topology .online { stroke: var(--online); } svg.topology .degraded { stroke: var(--degraded); } svg.topology .missing { stroke: var(--missing); }
svg.topology rect.box.online { stroke-width: 3; } svg.topology rect.box.degraded { stroke-width: 3; } svg.topology rect.box.missing { stroke-width: 3; }
svg.topology text.st-online { fill: var(--online); font-weight: 600; } svg.topology text.st-degraded { fill: var(--degraded); font-weight: 600; } svg.topology text.st-missing { fill: var(--missing); font-weight: 600; }
body.signin main { max-width: 30em; margin: 4em auto; }
body.signin input { width: 100%; padding: .4em; margin: .3em 0 .8em; font: inherit; }
.notice { padding: .5em .8em; border: 1px solid var(--degraded); border-radius: 6px; }
`;
