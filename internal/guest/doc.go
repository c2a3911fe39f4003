// Package guest is the inside of a sandbox as both the node and the guest
// agent see it; both import it, and it is small, for the agent links it:
//
//   - its network (docs/NETWORK.md): the address, gateway and DNS server
//     every sandbox has, the same everywhere, and the steps a sandbox's
//     init takes to use them: /etc/hosts and /etc/resolv.conf for a
//     container (whose interface the host configures from outside), and
//     the interface itself in a VM's guest kernel, by ioctl;
//   - what its disk tells the agent: the template config a tenant's
//     template writes into its disk (docs/TEMPLATES.md), and the files a
//     first exec reads, which the agent prefetches and a warm pool reads
//     ahead.
package guest
