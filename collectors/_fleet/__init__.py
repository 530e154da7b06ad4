"""Fleet sweeps on Dask: the worker side (:mod:`.remote`) and the client side (:mod:`.client`).

The public entry point is :func:`collectors.fleet.run_fleet_sweep`.
"""
