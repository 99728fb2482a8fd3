from servecal.launch import main

main()
