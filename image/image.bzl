"""polis_node_image: the node image, assembled by Polis' own image code.

The rule runs cmd/polis-image (package launch/image) as one Bazel action,
with the node agent Bazel built and the kernel package Bazel fetched
(pinned by its checksum in WORKSPACE and MODULE.bazel), so that every
input of the image is a Bazel input. The outputs are what qemu boots:
vmlinuz and initramfs.cpio.gz.
"""

def _polis_node_image_impl(ctx):
    kernel = ctx.actions.declare_file(ctx.label.name + "/vmlinuz")
    initramfs = ctx.actions.declare_file(ctx.label.name + "/initramfs.cpio.gz")
    deb = ctx.file.kernel_deb

    # The image code wants the .deb under its Debian name (it checks that
    # it is the package launch/image boots) and a writable cache for the
    # unpacked kernel, which is scratch here: the action makes one and
    # removes it.
    ctx.actions.run_shell(
        outputs = [kernel, initramfs],
        inputs = [deb, ctx.executable.agent],
        tools = [ctx.executable.tool],
        command = """
set -eu
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
mkdir "$scratch/deb"
ln -s "$PWD/$3" "$scratch/deb/$4"
"$1" --agent "$2" --kernel-deb "$scratch/deb/$4" --cache "$scratch/cache" --out "$5" >"$scratch/log" 2>&1 || { cat "$scratch/log" >&2; exit 1; }
""",
        arguments = [
            ctx.executable.tool.path,
            ctx.executable.agent.path,
            deb.path,
            ctx.attr.kernel_deb_name,
            kernel.dirname,
        ],
        # PATH (Bazel's strict action environment: /bin, /usr/bin,
        # /usr/local/bin) for dpkg-deb, which unpacks the kernel package.
        use_default_shell_env = True,
        mnemonic = "PolisNodeImage",
        progress_message = "Assembling the node image %s" % ctx.label,
    )
    return [DefaultInfo(files = depset([kernel, initramfs]))]

polis_node_image = rule(
    implementation = _polis_node_image_impl,
    doc = "The Polis node image (kernel and initramfs) for qemu's -kernel and -initrd.",
    attrs = {
        "agent": attr.label(
            doc = "The static node agent (polis-node, pure Go).",
            executable = True,
            cfg = "target",
            mandatory = True,
        ),
        "kernel_deb": attr.label(
            doc = "Debian's kernel package (launch/image.KernelPackage).",
            allow_single_file = [".deb"],
            mandatory = True,
        ),
        "kernel_deb_name": attr.string(
            doc = "The .deb's name as Debian names it (PACKAGE_VERSION_ARCH.deb).",
            mandatory = True,
        ),
        "tool": attr.label(
            doc = "cmd/polis-image, which assembles the image.",
            executable = True,
            cfg = "exec",
            default = "//cmd/polis-image",
        ),
    },
)
