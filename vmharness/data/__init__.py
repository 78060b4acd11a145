"""Files the harness ships beside its code: the guest image recipe (images/) and what goes onto the
serving machine (guest-setup/). They are package data, found from this module, so that an installed
copy (`pip install .`) has them as a checkout does; nothing walks up from the package to a source tree."""

from pathlib import Path

HERE = Path(__file__).resolve().parent
IMAGE_RECIPE = HERE / "images"  # recipe.toml, hooks/, overlay/ (images/README.md)
NGINX_TEMPLATE = HERE / "guest-setup" / "nginx.conf.template"
DEFAULT_RUN = HERE / "default-run.toml"  # the embedded experiment: `vmharness run` with no CONFIG, `make demo`
