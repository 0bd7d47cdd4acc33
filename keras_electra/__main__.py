"""``python -m keras_electra``: the ``keras-electra`` command."""

if __name__ == "__main__":
    import sys

    from keras_electra.cli import main

    sys.exit(main())
