"""Sign-in: token verification, Entra ID keys, the dev issuer."""
