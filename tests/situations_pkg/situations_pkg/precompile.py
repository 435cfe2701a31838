"""The build's workload: each compiled function once, as a user's first call makes it."""

import torch

from situations_pkg import model as M


def workload() -> None:
    x, y = M.batch()
    net = M.make()
    M.registered(x)  # one model made so far, as in a user's program that makes one and calls it
    optimizer = torch.optim.AdamW(net.parameters())
    for _ in range(2):
        optimizer.zero_grad()
        M.compiled_loss(net, x, y).backward()
        optimizer.step()
    for cls in (M.Block, M.Encoder, M.Decoder, M.Stem, M.Tuned, M.Threaded):
        M.predictor(M.make(cls))(x).sum().backward()
    M.scaled(torch.ones(M.WIDTH))(x)
    M.table_shifted(x)
    torch.manual_seed(0)
    M.dropped(x)
    M.squares(x)
    M.compiled_configured(x, M.Settings())
    M.compiled_by_kind(x, M.Settings())
    M.compiled_copied(x, M.Options())
    M.applied(M.make(), x).sum().backward()
    M.applied_all(M.make(), x).sum().backward()
    for compiled in (M.activated, M.environ_scaled, M.environ_late, M.world, M.debugged, M.resampled):
        compiled(x)
    for fn in (M.shift, M.bias, M.config_scaled):
        M.on_first_use(fn)(x)
    for compiled in M.CONTROLLED.values():  # two guarded codes each: a recompile a cold process would make
        for n in M.SIZES:
            compiled(M.batch(n)[0])
    torch.manual_seed(0)
    M.compiled_forced(x)
    for compiled in (M.reset_scaled, M.dynamo_reset_scaled, M.code_caches_scaled):
        compiled(x)
