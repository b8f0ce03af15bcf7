#!/bin/sh
# A stand-in for python:3.13-slim where no container registry can be reached: a minimal
# Debian bookworm (its python3, 3.11) from Debian's own packages, made with debootstrap
# and imported into podman. The image test builds Sundial's Dockerfile on it with
#   SUNDIAL_CONTAINER_BASE=localhost/sundial-test-base:bookworm
# Where HTTPS goes through a proxy with a certificate authority of its own, pip inside
# the build needs that authority: the host's bundle is copied in and named by PIP_CERT.
# Needs root, debootstrap and podman (apt-get install -y debootstrap podman).
set -eu
TAG=${1:-localhost/sundial-test-base:bookworm}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
ROOTFS=$(mktemp -d)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$ROOTFS" "$MIRROR"
rm -rf "$ROOTFS"/var/cache/apt/archives/*.deb "$ROOTFS"/var/lib/apt/lists/*
cp /etc/ssl/certs/ca-certificates.crt "$ROOTFS/etc/ssl/certs/ca-certificates.crt"
tar -C "$ROOTFS" -c . | podman import --change 'CMD ["python3"]' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' - "$TAG"
