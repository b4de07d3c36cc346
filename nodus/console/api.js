// Calls to the API server, as the signed-in user.
//
// The console holds no credential of its own: the browser sends the HttpOnly session cookie with every
// same-origin request, and every write carries the session's CSRF token in X-CSRF-Token (the server refuses
// a cookie-authenticated write without it). A 401 means the session ended: the page goes to the login form.
// Errors are the server's metav1.Status, surfaced with its message and fix. A read whose connection fails (no
// answer at all) is sent again twice, half a second apart; a write never is, since it may have been applied.

export const API = '/apis/nodus.dev/v1';

/** A non-2xx answer: `status`, the Status `reason`, `message` and `fix`, and `details`. */
export class APIError extends Error {
  constructor(status, body) {
    const message = (body && body.message) || `the server answered ${status}`;
    super(message);
    this.status = status;
    this.reason = body && body.reason;
    this.fix = body && body.fix;
    this.details = (body && body.details) || {};
  }

  static async from(response) {
    let body = null;
    try {
      body = await response.json();
    } catch {
      body = null;
    }
    return new APIError(response.status, body);
  }
}

let sessionPromise = null;

/** The signed-in user: {user, groups, csrfToken}, fetched once per page load (again after a failure). */
export function session() {
  sessionPromise ??= getJSON('/console/api/session').catch((error) => {
    sessionPromise = null;
    throw error;
  });
  return sessionPromise;
}

const accessCache = new Map();

/**
 * What the user may do in `project`: {"jobs/create": bool, "jobs/update": bool, ...}; all false when the server
 * could not be asked (then it is asked again next time).
 */
export async function access(project) {
  if (!accessCache.has(project)) {
    accessCache.set(project, getJSON(`/console/api/access?project=${encodeURIComponent(project)}`)
      .then((answer) => answer.allowed || {})
      .catch(() => {
        accessCache.delete(project);
        return {};
      }));
  }
  return accessCache.get(project);
}

const WRITES = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);
const READ_ATTEMPTS = 3;

/**
 * A request to the API server; resolves to the Response whatever its status, except 401 (the session is
 * gone: the browser goes to the login page). Options: json (a body sent as JSON), body, headers, accept,
 * signal.
 */
export async function request(method, path, options = {}) {
  const headers = new Headers(options.headers || {});
  let body = options.body;
  if (options.json !== undefined) {
    body = JSON.stringify(options.json);
    if (!headers.has('Content-Type')) headers.set('Content-Type', 'application/json');
  }
  if (WRITES.has(method)) headers.set('X-CSRF-Token', (await session()).csrfToken);
  headers.set('Accept', options.accept || 'application/json');
  const init = {method, headers, body, signal: options.signal, credentials: 'same-origin', cache: 'no-store', redirect: 'error'};
  let response;
  for (let attempt = 1; ; attempt += 1) {
    try {
      response = await fetch(path, init);
      break;
    } catch (error) {
      // fetch rejects only when there is no answer (a TypeError) or when the caller aborted.
      if (WRITES.has(method) || options.signal?.aborted || attempt === READ_ATTEMPTS) throw error;
      await sleep(500, options.signal);
    }
  }
  if (response.status === 401) {
    window.location.assign('/console/login');
    throw await APIError.from(response);
  }
  return response;
}

/** The response when it is 2xx, else its APIError. */
export async function ok(response) {
  if (!response.ok) throw await APIError.from(response);
  return response;
}

/** GET a JSON document. */
export async function getJSON(path, options = {}) {
  return (await ok(await request('GET', path, options))).json();
}

/** GET a text document (YAML, logs without follow). */
export async function getText(path, options = {}) {
  return (await ok(await request('GET', path, options))).text();
}

/** The lines of a streamed body (newline-delimited), as they arrive; the last one even without a newline. */
export async function* lines(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  try {
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      buffer += decoder.decode(value, {stream: true});
      let end;
      while ((end = buffer.indexOf('\n')) >= 0) {
        yield buffer.slice(0, end);
        buffer = buffer.slice(end + 1);
      }
    }
    buffer += decoder.decode();
    if (buffer) yield buffer;
  } finally {
    reader.cancel().catch(() => {});
  }
}

/** Resolve after `ms` milliseconds, or at once when `signal` aborts. */
export function sleep(ms, signal) {
  return new Promise((resolve) => {
    const timer = setTimeout(resolve, ms);
    signal?.addEventListener('abort', () => { clearTimeout(timer); resolve(); }, {once: true});
  });
}
