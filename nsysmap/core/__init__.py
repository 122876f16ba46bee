"""The leaves every stage shares: profile, schemas, errors, scalars, launch keys, range names."""
