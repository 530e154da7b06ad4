"""Private parts of :func:`regimes.cache_speedup`; the public facade is :mod:`regimes.speedup`.

``cells``
    the (group, x) cells measured with the cache on and off, as log-speedup levels, and
    the speedup's interval at each;
``collapses``
    each curve scanned downwards, the collapses chosen and tested, the trend fitted.
"""
