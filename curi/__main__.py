"""`python -m curi`: the `curi` command (as under torchrun --no-python or where the console
script is not on PATH)."""

from curi.cli import main

if __name__ == "__main__":
    main()
