// Calls to the admin API of this origin. The session cookie goes with every call (same
// origin); every change carries the session's CSRF token in X-CSRF-Token.

let csrf = null;
let onExpired = () => {};

/** Remembers the CSRF token of the login (or of GET /api/v1/session after a reload). */
export function setCsrf(token) { csrf = token || null; }

/** Called when the API answers 401 to a call made while logged in (the session ended). */
export function setOnExpired(f) { onExpired = f; }

/** An answer of the API that is not 2xx: its status, `error` and `problems` (path, message). */
export class ApiError extends Error {
  constructor(status, body) {
    super((body && typeof body.error === 'string' && body.error) || `HTTP ${status}`);
    this.status = status;
    this.problems = (body && Array.isArray(body.problems)) ? body.problems : [];
  }
}

/**
 * `method path` with `body` as JSON (when given); resolves to the answer's JSON (or null),
 * rejects with an ApiError.
 */
export async function api(method, path, body, { quiet401 = false } = {}) {
  const headers = { accept: 'application/json' };
  if (body !== undefined) headers['content-type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD' && csrf) headers['x-csrf-token'] = csrf;
  let answer;
  try {
    answer = await fetch(path, {
      method, headers, credentials: 'same-origin', cache: 'no-store',
      body: body === undefined ? undefined : JSON.stringify(body),
    });
  } catch (e) {
    throw new ApiError(0, { error: `the admin API cannot be reached: ${e.message}` });
  }
  let data = null;
  const text = await answer.text();
  if (text) {
    try { data = JSON.parse(text); } catch { data = { error: text.slice(0, 500) }; }
  }
  if (!answer.ok) {
    const err = new ApiError(answer.status, data);
    if (answer.status === 401 && !quiet401) onExpired(err);
    throw err;
  }
  return data;
}

/** A path segment, encoded (a `/` in a name becomes %2F). */
export const seg = (s) => encodeURIComponent(String(s));
