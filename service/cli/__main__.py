"""``python -m service.cli``: the ``gpuplace`` command line."""

from service.cli.app import main

main()
