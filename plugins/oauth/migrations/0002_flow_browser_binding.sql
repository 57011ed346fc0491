-- Login CSRF defence: a flow is bound to the browser that started it. POST /login sets a
-- random nonce in the HttpOnly `oauth-flow` cookie (Path=/oauth/callback) and keeps only
-- its SHA-256 (hex) here; the callback completes the flow only when the browser's cookie
-- hashes to this value. Flows started before this migration have NULL and cannot complete
-- (they expire within `oauth.flow_timeout_seconds`; the person simply starts again).
ALTER TABLE oauth_flows ADD COLUMN browser_hash TEXT;
