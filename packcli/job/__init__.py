"""The ``pack`` job: `packcli.job.run.pack_corpus` runs its stages (see `packcli.job.run`).

Nothing is imported here: ``verify`` plans and reads units (`packcli.job.units`, `packcli.job.fates`)
without the packing kernels that `packcli.job.run` imports (numba: a second of start-up on a small
artifact). ``packcli.pack_corpus`` is the public name.
"""
