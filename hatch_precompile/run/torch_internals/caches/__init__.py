"""The caches route's touches of torch's internals: cache keys hashed in the background, answered
without a callee, and work deferred to the first compile (``prefetch``). Its other hooks go
through the shared ``patching`` by touchpoint name, from run/caches/."""
