package imagebuild

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Push pushes every index of the layout in dir to registry/<name>:version
// (empty registry or version keep the layout's), with the credentials of
// the docker config (~/.docker/config.json, $DOCKER_CONFIG), and returns
// the references pushed.
func Push(ctx context.Context, dir, registry, version string) ([]string, error) {
	indexes, err := LoadLayout(dir)
	if err != nil {
		return nil, err
	}
	if len(indexes) == 0 {
		return nil, fmt.Errorf("the OCI layout %s holds no images (run `make images` first)", dir)
	}
	var pushed []string
	for ref, ii := range indexes {
		repo, tag, _ := strings.Cut(ref[strings.LastIndex(ref, "/")+1:], ":")
		reg := strings.TrimSuffix(ref[:strings.LastIndex(ref, "/")+1], "/")
		if registry != "" {
			reg = strings.TrimSuffix(registry, "/")
		}
		if version != "" {
			tag = version
		}
		target := reg + "/" + repo + ":" + tag
		r, err := name.ParseReference(target)
		if err != nil {
			return pushed, fmt.Errorf("image reference %s: %w", target, err)
		}
		if err := remote.WriteIndex(r, ii, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
			return pushed, fmt.Errorf("pushing %s: %w", target, err)
		}
		pushed = append(pushed, target)
	}
	return pushed, nil
}

// maxUnpackBytes bounds a file unpacked from an image.
const maxUnpackBytes = 512 << 20

// Unpack writes the image's file system (its layers applied in order) into
// root, as a container runtime lays out a container's root.
func Unpack(img v1.Image, root string) error {
	rc := mutate.Extract(img)
	defer func() { _ = rc.Close() }()
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		rel := path.Clean("/" + h.Name)
		target := filepath.Join(root, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, os.FileMode(h.Mode).Perm()|os.ModeDir); err != nil {
				return err
			}
			if err := os.Chmod(target, os.FileMode(h.Mode)&(os.ModePerm|os.ModeSticky)|fileModeBits(h.Mode)); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, os.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, io.LimitReader(tr, maxUnpackBytes))
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			if err := os.Symlink(h.Linkname, target); err != nil && !os.IsExist(err) {
				return err
			}
		default:
			return fmt.Errorf("%s: unexpected entry type %c", h.Name, h.Typeflag)
		}
	}
}

// fileModeBits maps a tar mode's sticky bit onto Go's.
func fileModeBits(mode int64) os.FileMode {
	if mode&0o1000 != 0 {
		return os.ModeSticky
	}
	return 0
}
