"""Where and how work runs: the engines (local, Ray), devices and precision, machine information,
and the supervisor of a Ray driver."""
