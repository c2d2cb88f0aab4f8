"""The kernel package the node image boots, pinned for Bazel.

KERNEL_DEB names the .deb and its checksum once, for WORKSPACE and
MODULE.bazel both. scripts/check-bazel fails when its package differs from
launch/image.KernelPackage, the Go build's pin. To move to a newer kernel,
change KernelPackage, then take the URL and SHA256 that
`apt-get download --print-uris PACKAGE` prints.
"""

KERNEL_DEB = struct(
    package = "linux-image-6.1.0-56-amd64",
    file = "linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb",
    url = "http://deb.debian.org/debian-security/pool/updates/main/l/linux-signed-amd64/linux-image-6.1.0-56-amd64_6.1.192-2_amd64.deb",
    sha256 = "a86e2049672f52354c4536a089203b6c82639420424d31c91cf31a181fd4d8f1",
)
