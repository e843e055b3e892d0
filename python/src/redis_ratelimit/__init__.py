"""Rate limits on Redis: the redis-ratelimit module's commands, or its Lua library where the module
cannot be loaded (FCALL, or EVALSHA), from asyncio and synchronous code."""

__version__ = "0.1.0"

__all__ = ["__version__"]
