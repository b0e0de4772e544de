#!/bin/sh
# The Debian packages that ship the real data sets the tests read (Fashion-MNIST, mlbench's
# letter / satellite / shuttle). Installed where apt-get can run (root, or password-less sudo);
# elsewhere the real-data tests say what to install and skip. Never fails the test command.
PACKAGES="dataset-fashion-mnist r-cran-mlbench"
missing=""
for package in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing="$missing $package"
done
[ -z "$missing" ] && exit 0
if ! command -v apt-get >/dev/null 2>&1; then
    echo "data packages:$missing not installed (no apt-get here); the real-data tests skip"
    exit 0
fi
if [ "$(id -u)" = 0 ]; then run=""; elif sudo -n true 2>/dev/null; then run="sudo -n"; else
    echo "data packages:$missing not installed (apt-get needs root); the real-data tests skip"
    exit 0
fi
echo "installing the data packages:$missing"
$run apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1 \
    || { $run apt-get update -q >/dev/null 2>&1 \
         && $run apt-get install -y -q --no-install-recommends $missing >/dev/null 2>&1; } \
    || echo "data packages:$missing could not be installed; the real-data tests skip"
exit 0
