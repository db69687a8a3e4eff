#!/usr/bin/env bash
# build-deb.sh -- `make deb`: build build/inventoryd_<version>_<arch>.deb with dpkg-deb.
#
#   packaging/build-deb.sh [OUT_DIR]          (OUT_DIR defaults to build)
#
# Compiles with Debian's hardening flags (dpkg-buildflags) into OUT_DIR/deb/obj, apart
# from the development build, stages `make install DESTDIR=... PREFIX=/usr` under
# OUT_DIR/deb/debian/inventoryd, strips the binary, gzips the manual page, adds the
# copyright file, changelog.Debian.gz and the DEBIAN/ control files from
# packaging/debian/, and computes Depends with dpkg-shlibdeps. The version is the
# latest entry of packaging/debian/changelog; its upstream part must equal
# INVENTORYD_VERSION in service/main.c. Needs dpkg-dev (apt-get install dpkg-dev).
set -euo pipefail
cd "$(dirname "$0")/.."
umask 022

die() {
    echo "build-deb: $*" >&2
    exit 1
}

out=${1:-build}
for tool in dpkg-deb dpkg-shlibdeps dpkg-parsechangelog dpkg-buildflags strip gzip; do
    command -v "$tool" >/dev/null 2>&1 ||
        die "$tool not found (apt-get install dpkg-dev binutils gzip)"
done

pkg=inventoryd
changelog=packaging/debian/changelog
version=$(dpkg-parsechangelog -l "$changelog" -S Version)
maintainer=$(dpkg-parsechangelog -l "$changelog" -S Maintainer)
code_version=$(sed -n 's/^#define INVENTORYD_VERSION "\(.*\)"$/\1/p' service/main.c)
[ "${version%-*}" = "$code_version" ] ||
    die "$changelog is at $version but service/main.c says $code_version; add an entry"
arch=$(dpkg --print-architecture)
deb=$out/${pkg}_${version}_${arch}.deb

work=$out/deb
root=$work/debian/$pkg
rm -rf "$work/debian" "$deb"
mkdir -p "$root"

echo "build-deb: compiling with dpkg-buildflags (hardening=+all) into $work/obj"
export DEB_BUILD_MAINT_OPTIONS=hardening=+all
make --no-print-directory BUILD="$work/obj" SANITIZER= \
    OPT="$(dpkg-buildflags --get CFLAGS) $(dpkg-buildflags --get CPPFLAGS)" \
    LDFLAGS="$(dpkg-buildflags --get LDFLAGS)" \
    install DESTDIR="$root" PREFIX=/usr UNITDIR=/lib/systemd/system >/dev/null

strip --remove-section=.comment --remove-section=.note --strip-unneeded \
    "$root/usr/sbin/$pkg"
gzip -9n "$root/usr/share/man/man8/$pkg.8"
doc=$root/usr/share/doc/$pkg
install -d "$doc"
install -m 0644 packaging/debian/copyright "$doc/copyright"
gzip -9nc "$changelog" >"$doc/changelog.Debian.gz"

# dpkg-shlibdeps wants to run next to a debian/control naming the package, on a
# binary under a package root (a directory holding DEBIAN/).
install -d -m 0755 "$root/DEBIAN"
printf 'Source: %s\n\nPackage: %s\nArchitecture: any\n' "$pkg" "$pkg" \
    >"$work/debian/control"
depends=$(cd "$work" && dpkg-shlibdeps -O "debian/$pkg/usr/sbin/$pkg" |
    sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || die "dpkg-shlibdeps found no dependencies"

for f in postinst prerm postrm; do
    install -m 0755 "packaging/debian/$f" "$root/DEBIAN/$f"
done
install -m 0644 packaging/debian/conffiles "$root/DEBIAN/conffiles"
size=$(du -k -s --exclude=DEBIAN "$root" | cut -f1)
sed -e "s|@VERSION@|$version|" -e "s|@ARCH@|$arch|" -e "s|@MAINTAINER@|$maintainer|" \
    -e "s|@SIZE@|$size|" -e "s|@DEPENDS@|$depends|" packaging/debian/control.in \
    >"$root/DEBIAN/control"
(cd "$root" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | LC_ALL=C sort -z |
    xargs -0 md5sum) >"$root/DEBIAN/md5sums"
chmod 0644 "$root/DEBIAN/md5sums"

dpkg-deb --root-owner-group -Zxz --build "$root" "$deb" >/dev/null
echo "build-deb: $deb"
dpkg-deb --info "$deb" | sed -n '/Package:/,$p'
dpkg-deb --contents "$deb"
