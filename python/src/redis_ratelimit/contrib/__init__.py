"""Integrations with other libraries: `limits` (and through it Flask-Limiter and slowapi) in
`redis_ratelimit.contrib.limits`."""
