#!/usr/bin/env python
"""Django's command-line entry point for the ordering platform."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from config.command_line import main

    main(sys.argv)
