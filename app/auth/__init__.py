"""Sign-in: token verification, the dev issuer, and the caller's identity."""
