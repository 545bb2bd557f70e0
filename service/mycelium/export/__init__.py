"""The compliance export: one room's history as a signed bundle anyone can verify offline
(``bundle`` builds it, ``verify`` checks it with nothing but the bundle and a public key)."""
