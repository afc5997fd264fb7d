// A pseudo-terminal for `kubectl exec -t`, with golang.org/x/sys only.
package main

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
	"k8s.io/cri-streaming/pkg/streaming/remotecommand"
)

// openPty opens a new terminal pair: the master (ours) and the slave (the command's).
func openPty() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	var n uint32
	var ioctlErr error
	// Through SyscallConn, not Fd(): Fd() would switch the file to blocking mode.
	cerr := withFd(master, func(fd int) {
		if ioctlErr = unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); ioctlErr != nil {
			return
		}
		n, ioctlErr = unix.IoctlGetUint32(fd, unix.TIOCGPTN)
	})
	if cerr != nil || ioctlErr != nil {
		_ = master.Close()
		return nil, nil, fmt.Errorf("pty: %v %v", cerr, ioctlErr)
	}
	slave, err = os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		_ = master.Close()
		return nil, nil, err
	}
	return master, slave, nil
}

func withFd(f *os.File, fn func(fd int)) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	return rc.Control(func(fd uintptr) { fn(int(fd)) })
}

func setWinsize(master *os.File, sz remotecommand.TerminalSize) {
	_ = withFd(master, func(fd int) {
		_ = unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, &unix.Winsize{Row: sz.Height, Col: sz.Width})
	})
}
