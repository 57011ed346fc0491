"""The daemon's AT Protocol layer.

- `syntax`: checks for DIDs, handles, NSIDs, record keys, AT-URIs; TIDs.
- `identity`: handle <-> DID resolution with a bidirectional check, cached in SQLite.
- `pds`: XRPC with timeouts and bounded retries; `RepoClient` (repo operations as an account).
- `accounts`: community accounts (provisioned or brought with an app password), sealed
  credentials, shared and refreshed PDS sessions.
- `lexicons`: our lexicons (`lexicons/*.json`) and a validator for the records we write.

Import the submodules you need; this package imports nothing (the SDK pieces are heavy).
"""
