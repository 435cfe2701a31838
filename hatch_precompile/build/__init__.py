"""Build side: what runs inside a wheel build. Only ``hooks`` and ``plugin`` know hatchling.

The workloads run in a child process (``worker``, with its ``observe``rs), started and watched
by ``capture``, which lays out the artifacts; ``target`` decides which Python that child is.
"""
